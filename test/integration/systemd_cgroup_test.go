package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/systemd"
)

// unitProps reads properties of a systemd unit with systemctl show.
func unitProps(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-p", strings.Join(props, ","), unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl show %s: %v: %s", unit, err, out)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// unitGone reports whether systemd no longer has unit running: not
// loaded, or loaded and inactive.
func unitGone(t *testing.T, unit string) error {
	p := unitProps(t, unit, "LoadState", "ActiveState")
	if p["LoadState"] == "not-found" || p["ActiveState"] == "inactive" {
		return nil
	}
	return fmt.Errorf("unit %s: %v", unit, p)
}

// unifiedCgroupOf is the cgroup v2 path of pid (its "0::" line).
func unifiedCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data := readHostFile(t, fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, l := range strings.Split(data, "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("pid %d has no cgroup v2 line:\n%s", pid, data)
	return ""
}

// TestSystemdCgroupDriver runs a pod and containers under the systemd
// cgroup driver, on a host whose PID 1 is systemd with pure cgroup v2 (the
// Debian 12 test guest): slices and scopes made through D-Bus, resources
// in the scope's files, stats and PSI, updates, OOM, the monitors in their
// own scopes, restart recovery, and nothing left after removal.
func TestSystemdCgroupDriver(t *testing.T) {
	if !systemd.Booted() {
		t.Skip("PID 1 is not systemd")
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		t.Skip("not a pure cgroup v2 host")
	}
	e, ti := newContainerEnvWith(t, envOptions{cgroupDriver: "systemd"}, "busybox")
	ref := ti.ref("busybox")

	rc, err := e.rt.RuntimeConfig(rpcCtx(t), &runtimeapi.RuntimeConfigRequest{})
	if err != nil || rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatalf("RuntimeConfig = %v, %v; want SYSTEMD", rc, err)
	}

	// A cgroupfs parent is refused, and nothing is left of the try.
	bad := e.podConfig("sd-bad", withCgroupParent("/kubepods/burstable/podx"))
	if _, err := e.rt.RunPodSandbox(rpcCtx(t), &runtimeapi.RunPodSandboxRequest{Config: bad}); code(err) != codes.InvalidArgument {
		t.Fatalf("RunPodSandbox with a cgroupfs parent: %v, want InvalidArgument", err)
	}

	parent := e.cgroupChild("burstable-pod1")
	parentDir := e.parentDir(parent)
	pod := e.runTestPod(t, "sd", withCgroupParent(parent), withPause())
	_, info := e.status(t, pod.id)
	sbScope := systemd.ScopeName(pod.id)
	// crun runs the container's processes, and sets its limits, in a
	// "container" leaf below the scope, started by podbayd (oci) or by
	// the shim (vm) alike.
	leaf := ""
	if filepath.Base(suiteOCIRuntime) == "crun" {
		leaf = "/container"
	}
	if got := unifiedCgroupOf(t, info.Pid); got != parentDir+"/"+sbScope+leaf {
		t.Errorf("pause cgroup %s, want %s/%s%s", got, parentDir, sbScope, leaf)
	}
	if p := unitProps(t, sbScope, "ActiveState", "Slice"); p["ActiveState"] != "active" || p["Slice"] != parent {
		t.Errorf("sandbox scope %s: %v, want active in %s", sbScope, p, parent)
	}

	// Where a monitor is: conmon per container, the shim per pod.
	monitorScope := func(pid int, unit string) {
		t.Helper()
		got := unifiedCgroupOf(t, pid)
		if want := "/system.slice/" + unit; got != want {
			t.Errorf("monitor %d in %s, want %s", pid, got, want)
		}
		if daemon := unifiedCgroupOf(t, e.daemonPid()); got == daemon {
			t.Errorf("monitor %d shares podbayd's cgroup %s", pid, daemon)
		}
		if p := unitProps(t, unit, "ActiveState"); p["ActiveState"] != "active" {
			t.Errorf("monitor scope %s: %v", unit, p)
		}
	}
	if suiteRuntimeType == "vm" {
		shim := shimProcess(pod.id)
		if shim == 0 {
			t.Fatal("no shim for the pod")
		}
		monitorScope(shim, "podbay-shim-"+pod.id+".scope")
	} else if mons := conmonsOf(pod.id); len(mons) == 1 {
		monitorScope(mons[0], "podbay-conmon-"+pod.id+".scope")
	} else {
		t.Errorf("sandbox conmons %v", mons)
	}

	// Resources into the scope's files.
	swap := fileExists(filepath.Join("/sys/fs/cgroup", parentDir, sbScope, "memory.swap.max"))
	unified := map[string]string{"pids.max": "200", "memory.high": strconv.Itoa(56 << 20)}
	ioWeight := strings.Contains(readHostFile(t, filepath.Join("/sys/fs/cgroup", parentDir, "cgroup.subtree_control")), "io")
	if ioWeight {
		unified["io.weight"] = "150"
	}
	cfg := containerConfig("worker", ref, ctrShell("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 3600"),
		func(c *runtimeapi.ContainerConfig) {
			r := c.Linux.Resources
			r.CpuPeriod, r.CpuQuota, r.CpuShares = 100000, 50000, 512
			r.MemoryLimitInBytes = 64 << 20
			if swap {
				r.MemorySwapLimitInBytes = 96 << 20
			}
			r.Unified = unified
		})
	id, pid := e.runContainer(t, pod, cfg)
	scope := systemd.ScopeName(id)
	dir := filepath.Join("/sys/fs/cgroup", parentDir, scope) + leaf
	if got := unifiedCgroupOf(t, pid); got != parentDir+"/"+scope+leaf {
		t.Errorf("container cgroup %s, want %s/%s%s", got, parentDir, scope, leaf)
	}
	if p := unitProps(t, scope, "ActiveState", "Slice"); p["ActiveState"] != "active" || p["Slice"] != parent {
		t.Errorf("container scope %s: %v, want active in %s", scope, p, parent)
	}
	if suiteRuntimeType != "vm" {
		if mons := conmonsOf(id); len(mons) == 1 {
			monitorScope(mons[0], "podbay-conmon-"+id+".scope")
		} else {
			t.Errorf("container conmons %v", mons)
		}
	}
	file := func(name string) string {
		t.Helper()
		return strings.TrimSpace(readHostFile(t, filepath.Join(dir, name)))
	}
	want := map[string]string{
		"cpu.max":     "50000 100000",
		"cpu.weight":  strconv.FormatUint(cgroups.SharesToWeight(512), 10),
		"memory.max":  strconv.Itoa(64 << 20),
		"memory.high": strconv.Itoa(56 << 20),
		"pids.max":    "200",
	}
	if swap {
		want["memory.swap.max"] = strconv.Itoa(32 << 20)
	}
	if ioWeight {
		want["io.weight"] = "default 150"
	}
	for name, w := range want {
		if got := file(name); got != w {
			t.Errorf("%s = %q, want %q", name, got, w)
		}
	}
	t.Logf("resources checked: %d files (memory.swap.max: %v, io.weight: %v)", len(want), swap, ioWeight)

	// Stats, PSI included, read from the scope.
	var st *runtimeapi.ContainerStats
	if err := eventually(60*time.Second, func() error {
		resp, err := e.rt.ContainerStats(rpcCtx(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			return err
		}
		st = resp.Stats
		switch {
		case st.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0:
			return fmt.Errorf("cpu usage 0")
		case st.GetMemory().GetWorkingSetBytes().GetValue() == 0:
			return fmt.Errorf("memory working set 0")
		}
		return nil
	}); err != nil {
		t.Errorf("ContainerStats: %v (%v)", err, st)
	}
	// A vm handler's stats come from its shim, and Debian's
	// containerd-shim-runc-v2 (1.6) sends no PSI; podbay reads it itself
	// for oci handlers.
	if suiteRuntimeType == "oci" && fileExists(filepath.Join(dir, "cpu.pressure")) && (st.GetCpu().GetPsi() == nil || st.GetMemory().GetPsi() == nil) {
		t.Errorf("no PSI in the stats of a cgroup with cpu.pressure: %v", st)
	}
	ps, err := e.rt.PodSandboxStats(rpcCtx(t), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod.id})
	if err != nil || ps.GetStats().GetLinux().GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Errorf("PodSandboxStats (the pod slice's): %v, %v", ps, err)
	}

	// UpdateContainerResources rewrites the scope's files.
	if _, err := e.rt.UpdateContainerResources(rpcCtx(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 30000, CpuShares: 1024,
			MemoryLimitInBytes: 96 << 20, MemorySwapLimitInBytes: map[bool]int64{true: 128 << 20}[swap]},
	}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	for name, w := range map[string]string{"cpu.max": "30000 100000", "memory.max": strconv.Itoa(96 << 20),
		"cpu.weight": strconv.FormatUint(cgroups.SharesToWeight(1024), 10)} {
		if got := file(name); got != w {
			t.Errorf("after update: %s = %q, want %q", name, got, w)
		}
	}

	// OOM: the kernel kills in the scope, podbay says OOMKilled.
	oom := e.createContainer(t, pod, containerConfig("oom", ref, ctrMemoryLimit(8<<20),
		ctrShell("x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo survived ${#x}; exit 0")))
	e.startContainer(t, oom)
	if s := e.waitContainerState(t, oom, runtimeapi.ContainerState_CONTAINER_EXITED, 3*containerExitTimeout); s.Reason != "OOMKilled" {
		t.Errorf("OOM container: exit %d reason %q, want OOMKilled\n%s", s.ExitCode, s.Reason, e.containerLogTail(s))
	}
	e.removeContainer(t, oom)
	if err := eventually(30*time.Second, func() error { return unitGone(t, systemd.ScopeName(oom)) }); err != nil {
		t.Error(err)
	}

	// Stop and remove: the scope and its cgroup go.
	e.stopContainer(t, id, 10)
	e.removeContainer(t, id)
	if err := eventually(30*time.Second, func() error {
		if err := unitGone(t, scope); err != nil {
			return err
		}
		if fileExists(dir) {
			return fmt.Errorf("%s still there", dir)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// SIGKILL podbayd, restart: the pod is recovered and removable.
	id2, _ := e.runContainer(t, pod, containerConfig("survivor", ref, ctrCommand("sleep", "3600")))
	e.restart("")
	if s, _ := e.containerStatus(t, id2); s.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after restart, container %s is %v", short(id2), s.State)
	}
	if s, _ := e.status(t, pod.id); s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("after restart, pod is %v", s.State)
	}
	if _, err := e.rt.ContainerStats(rpcCtx(t), &runtimeapi.ContainerStatsRequest{ContainerId: id2}); err != nil {
		t.Errorf("ContainerStats after restart: %v", err)
	}
	e.stopAndRemove(t, pod.id)

	// Nothing of the pod's under its slice, no scope of its left.
	units := []string{sbScope, systemd.ScopeName(id2), "podbay-conmon-" + pod.id + ".scope",
		"podbay-conmon-" + id2 + ".scope", "podbay-shim-" + pod.id + ".scope"}
	if err := eventually(60*time.Second, func() error {
		for _, u := range units {
			if err := unitGone(t, u); err != nil {
				return err
			}
		}
		entries, err := os.ReadDir(filepath.Join("/sys/fs/cgroup", parentDir))
		if err != nil {
			return nil // the slice itself is gone
		}
		for _, ent := range entries {
			if ent.IsDir() {
				return fmt.Errorf("pod slice %s still holds %s", parent, ent.Name())
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	e.assertNoLeaks(t)
	// The kubelet stops its pod slice; so does the test, and it goes.
	if out, err := exec.Command("systemctl", "stop", parent).CombinedOutput(); err != nil {
		t.Errorf("systemctl stop %s: %v: %s", parent, err, out)
	}
	if err := eventually(30*time.Second, func() error {
		if fileExists(filepath.Join("/sys/fs/cgroup", parentDir)) {
			return fmt.Errorf("%s still there after the slice stopped", parentDir)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
