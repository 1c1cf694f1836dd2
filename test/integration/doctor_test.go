package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/doctor"
	"github.com/podbay/podbay/internal/netns"
)

// runDoctor runs `podbay doctor --json` on the env's config and returns
// its report and exit status.
func (e *env) runDoctor(t *testing.T) (*doctor.Report, int) {
	t.Helper()
	// The harness gives each daemon start a metrics port of its own.
	cmd := exec.Command(bin("podbay"), "doctor", "--json", "--config", e.configPath, "--metrics-address", e.metricsAddr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("podbay doctor: %v\n%s", err, stderr.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("podbay doctor output: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	return &r, code
}

// plantedLeaks are resources that look like podbay's and that no record
// owns.
type plantedLeaks struct {
	netnsID, dirID, ipamID       string
	netnsPath, dir, bundle, ipam string
}

func (e *env) plantLeaks(t *testing.T) *plantedLeaks {
	t.Helper()
	p := &plantedLeaks{netnsID: randHex(32), dirID: randHex(32), ipamID: randHex(32)}
	p.netnsPath = e.netnsPath(p.netnsID)
	p.dir = filepath.Join(e.rootDir, "sandboxes", p.dirID)
	p.bundle = filepath.Join(e.stateDir, "bundles", p.dirID)
	// The last address of the env's subnet: host-local hands out the
	// first ones.
	last := make(net.IP, len(e.subnet.IP.To4()))
	for i := range last {
		last[i] = e.subnet.IP.To4()[i] | ^e.subnet.Mask[i]
	}
	last[len(last)-1]--
	p.ipam = filepath.Join(e.ipamDir, e.netName, last.String())
	t.Cleanup(func() { p.remove(t) })
	if err := netns.Pin(p.netnsPath); err != nil {
		t.Fatal(err)
	}
	// A sandbox dir and its bundle, which an older podbay kept in it.
	for _, dir := range []string{filepath.Join(p.dir, "bundle"), p.bundle} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(p.ipam, []byte(p.ipamID+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *plantedLeaks) remove(t *testing.T) {
	if err := netns.Remove(p.netnsPath); err != nil {
		t.Error(err)
	}
	for _, path := range []string{p.dir, p.bundle, p.ipam} {
		if err := os.RemoveAll(path); err != nil {
			t.Error(err)
		}
	}
}

// requireLeaks checks that the report lists exactly the planted leaks.
func (p *plantedLeaks) requireLeaks(t *testing.T, r *doctor.Report) {
	t.Helper()
	want := map[string]string{p.netnsID: doctor.KindNetns, p.dirID: doctor.KindDir, p.ipamID: doctor.KindIPAM}
	found := map[string]bool{}
	dirs := map[string]bool{}
	for _, l := range r.Leaks {
		kind, ok := want[l.ID]
		if !ok || kind != l.Kind {
			t.Errorf("unexpected leak: %+v", l)
			continue
		}
		found[l.ID] = true
		what := map[string]string{p.netnsID: p.netnsPath + " (mounted namespace)", p.dirID: p.dir, p.ipamID: p.ipam}[l.ID]
		if l.ID == p.dirID {
			what = l.Object
			dirs[l.Object] = true
		}
		if !strings.Contains(l.What, what) || l.Cleanup == "" {
			t.Errorf("%s leak %+v does not name %s or has no cleanup", kind, l, what)
		}
	}
	for id, kind := range want {
		if !found[id] {
			t.Errorf("planted %s leak %s not reported", kind, id)
		}
	}
	for _, dir := range []string{p.dir, p.bundle} {
		if !dirs[dir] {
			t.Errorf("planted dir %s not reported", dir)
		}
	}
}

// TestDoctor runs podbay doctor against a real daemon: with a pod and a
// container running it finds no leak, over the CRI while the daemon runs
// and from the database once it is stopped; resources planted to look like
// podbay's are each reported, with the leaks exit status, from both
// sources; the host checks give this host's verdicts.
func TestDoctor(t *testing.T) {
	e, ti := newContainerEnv(t, "busybox")
	hostPort := freePort(t)
	pod := e.runTestPod(t, "doctor", func(c *runtimeapi.PodSandboxConfig) {
		c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: int32(hostPort)}}
	})
	ctr := e.createContainer(t, pod, containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	e.startContainer(t, ctr)

	// Running: the records come from the daemon, nothing leaks.
	r, code := e.runDoctor(t)
	if code != doctor.ExitOK || r.Records == nil || r.Records.Source != doctor.SourceCRI || len(r.Leaks) != 0 {
		t.Fatalf("daemon running, nothing planted: exit %d, records %+v, leaks %+v, error %q", code, r.Records, r.Leaks, r.LeakError)
	}
	if owned := r.Records.Owned(); !owned[pod.id] || !owned[ctr] {
		t.Errorf("records %+v lack pod %s or container %s", r.Records, pod.id, ctr)
	}
	checkHostVerdicts(t, r, true)

	planted := e.plantLeaks(t)
	r, code = e.runDoctor(t)
	if code != doctor.ExitLeaks || r.Records.Source != doctor.SourceCRI {
		t.Errorf("daemon running, leaks planted: exit %d (want %d), source %q", code, doctor.ExitLeaks, r.Records.Source)
	}
	planted.requireLeaks(t, r)

	// Stopped (the pod keeps running): the records come from the
	// database, read without changing it.
	e.stop()
	dbPath := filepath.Join(e.rootDir, "podbay.db")
	before, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	r, code = e.runDoctor(t)
	if code != doctor.ExitLeaks || r.Records == nil || r.Records.Source != doctor.SourceDatabase {
		t.Fatalf("daemon stopped, leaks planted: exit %d, records %+v, error %q", code, r.Records, r.LeakError)
	}
	if owned := r.Records.Owned(); !owned[pod.id] || !owned[ctr] {
		t.Errorf("database records %+v lack pod %s or container %s", r.Records, pod.id, ctr)
	}
	planted.requireLeaks(t, r)
	checkHostVerdicts(t, r, false)
	if after, err := os.ReadFile(dbPath); err != nil || !bytes.Equal(before, after) {
		t.Errorf("podbay doctor changed the database (%v)", err)
	}
	if mounted, err := netns.IsMounted(planted.netnsPath); err != nil || !mounted {
		t.Errorf("podbay doctor touched the planted namespace: mounted %v, %v", mounted, err)
	}

	planted.remove(t)
	if r, code = e.runDoctor(t); code != doctor.ExitOK || len(r.Leaks) != 0 {
		t.Errorf("daemon stopped, leaks removed: exit %d, leaks %+v", code, r.Leaks)
	}

	// The text report says the same for an operator.
	out, err := exec.Command(bin("podbay"), "doctor", "--config", e.configPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Leak report (records from database") || !strings.Contains(string(out), "nothing of podbay's is left") {
		t.Errorf("text report (%v):\n%s", err, out)
	}

	e.start("")
	e.stopContainer(t, ctr, 0)
	e.removeContainer(t, ctr)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// checkHostVerdicts checks the verdicts that depend on this host against
// what the host says, read here independently.
func checkHostVerdicts(t *testing.T, r *doctor.Report, running bool) {
	t.Helper()
	got := map[string]doctor.Result{}
	for _, c := range r.Checks {
		got[c.Check] = c
		if c.Verdict == doctor.Fail {
			t.Errorf("check failed: %+v", c)
		}
	}
	want := func(check string, v doctor.Verdict, reason string) {
		t.Helper()
		c, ok := got[check]
		if !ok || c.Verdict != v || !strings.Contains(c.Reason, reason) {
			t.Errorf("%s: got %+v, want %s with %q", check, c, v, reason)
		}
	}
	// Layout: cgroup2 at the root is v2; a cgroup2 at unified/ is hybrid.
	var root, unified unix.Statfs_t
	layout := "cgroup v1"
	if unix.Statfs("/sys/fs/cgroup", &root) == nil && root.Type == unix.CGROUP2_SUPER_MAGIC {
		layout = "cgroup v2"
	} else if unix.Statfs("/sys/fs/cgroup/unified", &unified) == nil && unified.Type == unix.CGROUP2_SUPER_MAGIC {
		layout = "cgroup v1 (hybrid)"
	}
	comm, _ := os.ReadFile("/proc/1/comm")
	want("cgroups", got["cgroups"].Verdict, layout)
	// Kubernetes 1.35+ kubelets refuse cgroup v1 without failCgroupV1: false.
	if layout == "cgroup v2" {
		want("cgroup version", doctor.OK, "cgroup v2")
	} else {
		want("cgroup version", doctor.Warn, "failCgroupV1: false")
	}
	if strings.TrimSpace(string(comm)) == "systemd" {
		want("cgroups", doctor.Warn, "PID 1 is systemd")
	} else {
		want("cgroups", doctor.OK, fmt.Sprintf("PID 1 is %s (no systemd)", strings.TrimSpace(string(comm))))
	}
	// Capabilities: this VM lacks CAP_SYS_RESOURCE (oom_score_adj
	// clamped); a full root has all three.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	capVerdict := doctor.OK
	if data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) == 0 {
		capVerdict = doctor.Warn
		want("capabilities", capVerdict, "lacks CAP_SYS_RESOURCE: pods' oom_score_adj is clamped")
	} else {
		want("capabilities", capVerdict, "CAP_SYS_RESOURCE")
	}
	if running {
		want("capabilities", capVerdict, "podbayd (pid ")
		want("metrics address", doctor.OK, "held by podbayd itself")
	} else {
		want("metrics address", doctor.OK, "is free")
	}
	for _, c := range []string{"config", "runtime runc", "conmon", "cni", "iptables", "cgroup controllers", "namespaces", "netns dir", "root dir", "state dir"} {
		if got[c].Verdict != doctor.OK {
			t.Errorf("%s: %+v", c, got[c])
		}
	}
}

// TestDoctorFindsOrphans: what a crash between CNI ADD and the record
// leaves (a pinned namespace attached to the env's network: veth, IP,
// masquerade rules, the libcni cache entry) and a process that looks like
// a podbay conmon of an unknown sandbox are each reported by podbay doctor
// while the daemon runs, and nothing once they are gone.
func TestDoctorFindsOrphans(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	id := e.orphanCNIAttachment(t)
	procID := randHex(32)
	// sh's arguments after the script show in its command line: those of
	// a conmon of sandbox procID, with a bundle in podbay's root.
	proc := exec.Command("sh", "-c", "sleep 600", "conmon", "--cid", procID, "--bundle", filepath.Join(e.rootDir, "sandboxes", procID, "bundle"))
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		proc.Process.Kill() //nolint:errcheck
		proc.Wait()         //nolint:errcheck
	}()

	r, code := e.runDoctor(t)
	if code != doctor.ExitLeaks || r.Records == nil || r.Records.Source != doctor.SourceCRI {
		t.Errorf("exit %d (want %d), records %+v, error %q", code, doctor.ExitLeaks, r.Records, r.LeakError)
	}
	kinds := map[string]int{}
	for _, l := range r.Leaks {
		t.Logf("reported: %s %.13s %s; cleanup: %s", l.Kind, l.ID, l.What, l.Cleanup)
		switch {
		case l.ID == id:
			kinds[l.Kind]++
		case l.ID == procID && l.Kind == doctor.KindProcess:
			kinds["process of "+procID]++
		default:
			t.Errorf("unexpected leak: %+v", l)
		}
	}
	for _, k := range []string{doctor.KindNetns, doctor.KindVeth, doctor.KindIPAM, doctor.KindCNICache, doctor.KindIptables} {
		if kinds[k] == 0 {
			t.Errorf("no %s leak reported for the orphaned attachment", k)
		}
	}
	// sh and the sleep under it.
	if kinds["process of "+procID] != 2 {
		t.Errorf("%d processes reported for %s, want 2 (sh and its sleep)", kinds["process of "+procID], procID)
	}

	proc.Process.Kill() //nolint:errcheck
	proc.Wait()         //nolint:errcheck
	e.delCNIAttachment(t, id)
	if err := netns.Remove(e.netnsPath(id)); err != nil {
		t.Fatal(err)
	}
	if r, code := e.runDoctor(t); code != doctor.ExitOK || len(r.Leaks) != 0 {
		t.Errorf("after cleanup: exit %d, leaks %+v", code, r.Leaks)
	}
}
