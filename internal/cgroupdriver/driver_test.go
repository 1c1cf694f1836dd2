package cgroupdriver

import (
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestSystemdCgroupPaths(t *testing.T) {
	s := New(Config{Systemd: true, DefaultParent: "podbay.slice"})
	const pod = "kubepods-burstable-pod1234.slice"
	if err := s.CheckParent("/kubepods/burstable/pod1234"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a cgroupfs parent under systemd: %v", err)
	}
	if err := s.CheckParent(pod); err != nil {
		t.Error(err)
	}
	if err := s.CheckParent(""); err != nil {
		t.Errorf("no parent (the default): %v", err)
	}
	if got := s.SpecPath(pod, "abc"); got != pod+":podbay:abc" {
		t.Errorf("cgroupsPath %q", got)
	}
	if got := s.Dir(pod, "sb1"); got != "/kubepods.slice/kubepods-burstable.slice/"+pod+"/podbay-sb1.scope" {
		t.Errorf("sandbox cgroup %q", got)
	}
	if got := s.PodDir(pod); got != "/kubepods.slice/kubepods-burstable.slice/"+pod {
		t.Errorf("pod cgroup %q", got)
	}
	if got := s.PodDir("podbay.slice"); got != "" {
		t.Errorf("a pod under the default parent has a cgroup of its own: %q", got)
	}
	if s.MonitorCgroup() != "" {
		t.Errorf("monitor cgroup under systemd: %q", s.MonitorCgroup())
	}

	fs := New(Config{DefaultParent: "/podbay"})
	if err := fs.CheckParent("/kubepods/x"); err != nil {
		t.Error(err)
	}
	if fs.SpecPath("/kubepods/pod1", "c1") != "/kubepods/pod1/podbay-c1" || fs.Dir("/kubepods/pod1", "sb1") != "/kubepods/pod1/podbay-sb1" ||
		fs.PodDir("/kubepods/pod1") != "/kubepods/pod1" || fs.MonitorCgroup() != "/podbay/conmon" {
		t.Error("cgroupfs paths changed")
	}
}

// fakeOOM counts the OOM kills of cgroups by path.
type fakeOOM map[string]uint64

func (f fakeOOM) OOMKills(path string) (uint64, error) {
	n, ok := f[path]
	if !ok {
		return 0, errdefs.ErrNotFound
	}
	return n, nil
}

// The parent's count is read, above crun's leaf, only under systemd; a
// kill is attributed to a SIGKILLed container that was not being stopped
// and whose parent's count grew.
func TestParentOOMAttribution(t *testing.T) {
	const scope = "/kubepods.slice/pod1.slice/podbay-c1.scope"
	oom := fakeOOM{"/kubepods.slice/pod1.slice": 2}
	d := New(Config{Systemd: true, OOM: oom})
	before := d.ParentOOMKills(scope + "/container")
	if before == nil || *before != 2 {
		t.Fatalf("ParentOOMKills = %v, want 2", before)
	}
	if New(Config{OOM: oom}).ParentOOMKills(scope) != nil {
		t.Error("ParentOOMKills under cgroupfs is not nil")
	}
	if d.ParentOOMKilled(before, scope, sigkilled, false) {
		t.Error("OOM kill attributed without the count growing")
	}
	oom["/kubepods.slice/pod1.slice"] = 3
	if !d.ParentOOMKilled(before, scope, sigkilled, false) {
		t.Error("OOM kill not attributed")
	}
	if d.ParentOOMKilled(before, scope, 128+15, false) || d.ParentOOMKilled(before, scope, sigkilled, true) || d.ParentOOMKilled(nil, scope, sigkilled, false) {
		t.Error("OOM kill attributed to a SIGTERM, a stop, or a container without a count")
	}
}
