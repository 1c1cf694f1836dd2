package server

import (
	"context"
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/sandbox"
)

func driverServer(driver, parent string) *Server {
	cfg := config.Default()
	cfg.CgroupDriver, cfg.DefaultCgroupParent = driver, parent
	return &Server{cfg: cfg}
}

func TestRuntimeConfigReportsDriver(t *testing.T) {
	for driver, want := range map[string]runtimeapi.CgroupDriver{
		"systemd": runtimeapi.CgroupDriver_SYSTEMD, "cgroupfs": runtimeapi.CgroupDriver_CGROUPFS,
	} {
		resp, err := driverServer(driver, "/podbay").RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
		if err != nil || resp.GetLinux().GetCgroupDriver() != want {
			t.Errorf("%s: RuntimeConfig = %v, %v; want %v", driver, resp, err, want)
		}
	}
}

func TestSystemdCgroupPaths(t *testing.T) {
	s := driverServer("systemd", "podbay.slice")
	const pod = "kubepods-burstable-pod1234.slice"
	if err := s.checkCgroupParent("/kubepods/burstable/pod1234"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a cgroupfs parent under systemd: %v", err)
	}
	if err := s.checkCgroupParent(pod); err != nil {
		t.Error(err)
	}
	if err := s.checkCgroupParent(""); err != nil {
		t.Errorf("no parent (the default): %v", err)
	}
	if got := s.cgroupSpecPath(pod, "abc"); got != pod+":podbay:abc" {
		t.Errorf("cgroupsPath %q", got)
	}
	rec := sandbox.Record{ID: "sb1", CgroupParent: pod}
	if got := s.sandboxCgroupDir(rec); got != "/kubepods.slice/kubepods-burstable.slice/"+pod+"/podbay-sb1.scope" {
		t.Errorf("sandbox cgroup %q", got)
	}
	if got := s.podCgroupDir(rec); got != "/kubepods.slice/kubepods-burstable.slice/"+pod {
		t.Errorf("pod cgroup %q", got)
	}
	if got := s.podCgroupDir(sandbox.Record{ID: "sb2", CgroupParent: "podbay.slice"}); got != "" {
		t.Errorf("a pod under the default parent has a cgroup of its own: %q", got)
	}
	if s.monitorCgroup() != "" {
		t.Errorf("monitor cgroup under systemd: %q", s.monitorCgroup())
	}

	fs := driverServer("cgroupfs", "/podbay")
	if err := fs.checkCgroupParent("/kubepods/x"); err != nil {
		t.Error(err)
	}
	rec = sandbox.Record{ID: "sb1", CgroupParent: "/kubepods/pod1"}
	if fs.cgroupSpecPath("/kubepods/pod1", "c1") != "/kubepods/pod1/podbay-c1" || fs.sandboxCgroupDir(rec) != "/kubepods/pod1/podbay-sb1" ||
		fs.podCgroupDir(rec) != "/kubepods/pod1" || fs.monitorCgroup() != "/podbay/conmon" {
		t.Error("cgroupfs paths changed")
	}
}
