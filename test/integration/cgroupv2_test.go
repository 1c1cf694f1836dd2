package integration

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The tests in this file read the pure cgroup v2 files a container's limits
// land in. They find a container's cgroup only through /proc/<pid>/cgroup
// of its process, never by composing a path, so that they hold whatever
// cgroup driver (cgroupfs or systemd) and OCI runtime (runc or crun) the
// suite runs with. They skip on a host that is not pure cgroup v2 (this
// development VM's hybrid layout); make test-node runs them in a Debian 12
// guest.

// requireCgroupV2 skips unless /sys/fs/cgroup is the cgroup2 hierarchy.
func requireCgroupV2(t *testing.T) {
	t.Helper()
	requireRoot(t)
	if !pureCgroupV2() {
		t.Skip("needs a pure cgroup v2 host (/sys/fs/cgroup is not cgroup2 here); make test-node runs it")
	}
}

// pureCgroupV2 reports whether /sys/fs/cgroup is a cgroup2 mount.
func pureCgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// cgroupV2Dir is the cgroup v2 directory of pid's cgroup, as
// /proc/<pid>/cgroup names it: where the runtime set the container's
// limits. crun (with the systemd driver) runs a container's process in a
// "container" leaf below the container's scope and sets the limits there.
func cgroupV2Dir(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("cgroup of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join("/sys/fs/cgroup", rest)
		}
	}
	t.Fatalf("pid %d is in no cgroup v2 cgroup:\n%s", pid, data)
	return ""
}

// cgroupV2Parent is the cgroup above a container's own (its pod's), dir
// being what cgroupV2Dir returned: the parent of its scope, above crun's
// leaf.
func cgroupV2Parent(dir string) string {
	return filepath.Dir(strings.TrimSuffix(dir, "/container"))
}

// cgroupV2File reads one file of a cgroup v2 directory, trimmed.
func cgroupV2File(t *testing.T, dir, file string) string {
	t.Helper()
	return strings.TrimSpace(readHostFile(t, filepath.Join(dir, file)))
}

// cgroupV2Has reports whether a cgroup v2 directory has file (its
// controller is enabled there, and the kernel has the feature).
func cgroupV2Has(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// cpuWeights are the cgroup v2 cpu.weight values OCI runtimes derive from
// CRI cpu shares: the linear mapping of runc < 1.3 and crun < 1.23
// ([2, 262144] onto [1, 10000]), and the quadratic one of later releases
// (which keeps 1024 shares at the default weight 100).
func cpuWeights(shares uint64) []string {
	linear := 1 + ((shares-2)*9999)/262142
	l := math.Log2(float64(shares))
	exp := (l*l+125*l)/612.0 - 7.0/34.0
	quadratic := uint64(math.Ceil(math.Pow(10, exp)))
	return []string{strconv.FormatUint(linear, 10), strconv.FormatUint(quadratic, 10)}
}

// expectCgroupV2 checks files of dir against want; a value of "" only
// requires the file to exist.
func expectCgroupV2(t *testing.T, when, dir string, want map[string][]string) {
	t.Helper()
	for _, file := range sortedKeys(want) {
		got := cgroupV2File(t, dir, file)
		ok := false
		for _, w := range want[file] {
			ok = ok || got == w
		}
		if !ok {
			t.Errorf("%s: %s of %s = %q, want one of %q", when, file, dir, got, want[file])
		}
	}
}

// TestCgroupV2ContainerResources: every resource of the CRI container
// config lands in the container's cgroup v2 files — cpu.max, cpu.weight,
// cpuset.cpus/mems, memory.max, memory.swap.max, hugetlb.<size>.max and the
// unified map (memory.high, pids.max, io.weight where the io controller
// is on) — and UpdateContainerResources changes them in place, seen from
// the host and from inside the container.
func TestCgroupV2ContainerResources(t *testing.T) {
	requireCgroupV2(t)
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "v2res")

	const mem = 64 << 20
	unified := map[string]string{"memory.high": strconv.Itoa(48 << 20), "pids.max": "77"}
	root := "/sys/fs/cgroup"
	withIO := strings.Contains(cgroupV2File(t, root, "cgroup.subtree_control"), "io")
	if withIO {
		unified["io.weight"] = "default 150"
	}
	cfg := containerConfig("main", images.ref("busybox"), ctrMemoryLimit(mem), ctrCommand("sleep", "1000"))
	r := cfg.Linux.Resources
	r.CpuPeriod, r.CpuQuota, r.CpuShares = 100000, 50000, 512
	r.CpusetCpus, r.CpusetMems = "0", "0"
	r.MemorySwapLimitInBytes = mem + 32<<20
	r.Unified = unified
	withHugetlb := strings.Contains(cgroupV2File(t, root, "cgroup.controllers"), "hugetlb")
	if withHugetlb {
		r.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}
	}
	id, pid := e.runContainer(t, pod, cfg)
	dir := cgroupV2Dir(t, pid)
	t.Logf("container cgroup %s (io %v, hugetlb %v)", dir, withIO, withHugetlb)

	want := map[string][]string{
		"cpu.max":     {"50000 100000"},
		"cpu.weight":  cpuWeights(512),
		"cpuset.cpus": {"0"},
		"cpuset.mems": {"0"},
		"memory.max":  {strconv.Itoa(mem)},
		"memory.high": {strconv.Itoa(48 << 20)},
		"pids.max":    {"77"},
	}
	if cgroupV2Has(dir, "memory.swap.max") {
		want["memory.swap.max"] = []string{strconv.Itoa(32 << 20)}
	} else {
		t.Logf("no memory.swap.max in %s: the kernel does not account swap", dir)
	}
	if withIO {
		want["io.weight"] = []string{"default 150"}
	}
	if withHugetlb {
		want["hugetlb.2MB.max"] = []string{strconv.Itoa(4 << 20)}
	}
	expectCgroupV2(t, "at start", dir, want)
	// The container sees its own cgroup at /sys/fs/cgroup (a cgroup
	// namespace), with the same limits.
	if got := strings.TrimSpace(e.execOutput(t, id, "cat", "/sys/fs/cgroup/memory.max")); got != strconv.Itoa(mem) {
		t.Errorf("memory.max from inside the container: %q, want %d", got, mem)
	}

	_, err := e.rt.UpdateContainerResources(rpcCtx(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 200000, CpuQuota: 100000, CpuShares: 2048,
			MemoryLimitInBytes: 128 << 20, MemorySwapLimitInBytes: 192 << 20,
			CpusetCpus: "0", CpusetMems: "0",
			Unified: map[string]string{"memory.high": strconv.Itoa(96 << 20), "pids.max": "99"},
		},
	})
	if err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	want["cpu.max"] = []string{"100000 200000"}
	want["cpu.weight"] = cpuWeights(2048)
	want["memory.max"] = []string{strconv.Itoa(128 << 20)}
	want["memory.high"] = []string{strconv.Itoa(96 << 20)}
	want["pids.max"] = []string{"99"}
	if _, ok := want["memory.swap.max"]; ok {
		want["memory.swap.max"] = []string{strconv.Itoa(64 << 20)}
	}
	expectCgroupV2(t, "after UpdateContainerResources", dir, want)
	if got := strings.TrimSpace(e.execOutput(t, id, "cat", "/sys/fs/cgroup/memory.max")); got != strconv.Itoa(128<<20) {
		t.Errorf("memory.max from inside the container after the update: %q, want %d", got, 128<<20)
	}
	if st, _ := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after the update, want RUNNING", st.State)
	}

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestCgroupV2Stats: on cgroup v2 ContainerStats, ListContainerStats and
// the pod's stats report CPU usage that grows while the container works, a
// memory working set, and pressure (PSI) for CPU, memory and IO where the
// kernel has PSI.
func TestCgroupV2Stats(t *testing.T) {
	requireCgroupV2(t)
	e, images := newContainerEnv(t, "busybox")
	// A cgroup of the pod's own, as the kubelet gives every pod: the pod's
	// pressure is that cgroup's (under the shared default parent there is
	// none to report, pressure being no sum).
	pod := e.runTestPod(t, "v2stats", withCgroupParent(e.cgroupChild("v2stats")))
	// A busy loop, and 16 MiB held in a variable.
	id, pid := e.runContainer(t, pod, containerConfig("busy", images.ref("busybox"),
		ctrShell("x=$(head -c 16777216 /dev/zero | tr '\\0' a); while true; do :; done")))
	dir := cgroupV2Dir(t, pid)
	psi := cgroupV2Has(dir, "cpu.pressure")

	stats := func() *runtimeapi.ContainerStats {
		t.Helper()
		resp, err := e.rt.ContainerStats(rpcCtx(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStats: %v", err)
		}
		return resp.Stats
	}
	// Generous: under emulation (make test-node's guest) filling the
	// variable alone takes many seconds.
	var first *runtimeapi.ContainerStats
	if err := eventually(2*time.Minute, func() error {
		first = stats()
		if ws := first.GetMemory().GetWorkingSetBytes().GetValue(); ws < 16<<20 {
			return fmt.Errorf("memory working set %d, want ≥ 16 MiB", ws)
		}
		if first.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
			return fmt.Errorf("cpu usage 0")
		}
		return nil
	}); err != nil {
		t.Errorf("ContainerStats: %v: %v", err, first)
	}
	// Usage from the cgroup's own cpu.stat, in nanoseconds.
	usec := func() uint64 {
		for _, l := range strings.Split(cgroupV2File(t, dir, "cpu.stat"), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				return n
			}
		}
		t.Fatalf("no usage_usec in %s/cpu.stat", dir)
		return 0
	}
	if err := eventually(20*time.Second, func() error {
		before := usec()
		s := stats()
		after := usec()
		got := s.GetCpu().GetUsageCoreNanoSeconds().GetValue() / 1000
		if got < before || got > after {
			return fmt.Errorf("ContainerStats cpu %d µs, cpu.stat %d..%d µs", got, before, after)
		}
		if got <= first.GetCpu().GetUsageCoreNanoSeconds().GetValue()/1000 {
			return fmt.Errorf("cpu usage did not grow from %d µs", got)
		}
		return nil
	}); err != nil {
		t.Errorf("cpu usage: %v", err)
	}
	last := stats()
	if psi && suiteRuntimeType == "vm" && last.GetCpu().GetPsi() == nil {
		// A vm handler's stats are the shim's metrics, as containerd's CRI
		// takes them: containerd-shim-runc-v2 sends PSI since containerd
		// 2.0, Debian 12's (1.6) none.
		t.Logf("the shim reports no PSI (containerd-shim-runc-v2 before 2.0)")
	} else if psi {
		if last.GetCpu().GetPsi() == nil || last.GetMemory().GetPsi() == nil || last.GetIo().GetPsi() == nil {
			t.Errorf("ContainerStats PSI on cgroup v2 with pressure files: cpu %v memory %v io %v",
				last.GetCpu().GetPsi(), last.GetMemory().GetPsi(), last.GetIo().GetPsi())
		} else if last.GetCpu().GetPsi().GetSome().GetTotal() == 0 {
			t.Logf("cpu pressure total 0 (a single busy container on an idle guest need not wait)")
		}
	} else {
		t.Logf("no cpu.pressure in %s: the kernel has no PSI", dir)
	}

	resp, err := e.rt.ListContainerStats(rpcCtx(t), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: pod.id}})
	if err != nil {
		t.Fatalf("ListContainerStats: %v", err)
	}
	if len(resp.Stats) != 1 || resp.Stats[0].GetAttributes().GetId() != id || resp.Stats[0].GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("ListContainerStats of the pod: %v", resp.Stats)
	}
	presp, err := e.rt.ListPodSandboxStats(rpcCtx(t), &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: pod.id}})
	if err != nil {
		t.Fatalf("ListPodSandboxStats: %v", err)
	}
	if len(presp.Stats) != 1 {
		t.Fatalf("ListPodSandboxStats: %d entries, want 1", len(presp.Stats))
	}
	pl := presp.Stats[0].GetLinux()
	if pl.GetCpu().GetUsageCoreNanoSeconds().GetValue() < last.GetCpu().GetUsageCoreNanoSeconds().GetValue()/2 ||
		pl.GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("pod stats cpu %v memory %v, container cpu %v", pl.GetCpu(), pl.GetMemory(), last.GetCpu())
	}
	if psi && pl.GetCpu().GetPsi() == nil {
		t.Errorf("pod stats without cpu PSI on cgroup v2: %v", pl.GetCpu())
	}

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestCgroupV2OOM: a container that goes past memory.max is OOM-killed by
// the kernel, and reported exited with reason OOMKilled (137), its
// cgroup's memory.events counting the kill; another container in the same
// pod goes on.
func TestCgroupV2OOM(t *testing.T) {
	requireCgroupV2(t)
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "v2oom")
	ref := images.ref("busybox")
	other, _ := e.runContainer(t, pod, containerConfig("other", ref, ctrCommand("sleep", "1000")))
	// The shell waits for a go-ahead file so that the test can find its
	// cgroup before the kill.
	cfg := containerConfig("oom", ref, ctrMemoryLimit(16<<20), ctrShell(
		"while [ ! -e /tmp/go ]; do sleep 0.1; done; x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo survived ${#x}"))
	cfg.Linux.Resources.MemorySwapLimitInBytes = 16 << 20 // no swap to escape to
	id, pid := e.runContainer(t, pod, cfg)
	dir := cgroupV2Dir(t, pid)
	if got := cgroupV2File(t, dir, "memory.max"); got != strconv.Itoa(16<<20) {
		t.Errorf("memory.max %s, want %d", got, 16<<20)
	}
	e.execOutput(t, id, "touch", "/tmp/go")
	st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Errorf("exit code %d reason %q, want 137 OOMKilled\n%s", st.ExitCode, st.Reason, e.containerLogTail(st))
	}
	if st, _ := e.containerStatus(t, other); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the other container of the pod is %v after the OOM kill, want RUNNING", st.State)
	}
	e.removeContainer(t, id)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestCgroupV2PodResize: a pod with a cgroup of its own (its cgroup
// parent) is resized in place (UpdatePodSandboxResources, KEP-1287): the
// pod's cgroup — the parent of its pause container's — gets the totals
// plus the overhead in cpu.max, cpu.weight and memory.max; a resize below
// the pod's usage is refused and changes nothing.
func TestCgroupV2PodResize(t *testing.T) {
	requireCgroupV2(t)
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "v2resize", withCgroupParent(e.cgroupChild("v2resize")), withPause(), func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 128 << 20}
	})
	app, _ := e.runContainer(t, pod, containerConfig("app", images.ref("busybox"), ctrCommand("sleep", "1000")))
	_, info := e.status(t, pod.id)
	podDir := cgroupV2Parent(cgroupV2Dir(t, info.Pid))
	t.Logf("pod cgroup %s", podDir)

	_, err := e.rt.UpdatePodSandboxResources(rpcCtx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod.id,
		Resources:    &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 200000, CpuShares: 1024, MemoryLimitInBytes: 256 << 20},
		Overhead:     &runtimeapi.LinuxContainerResources{CpuQuota: 10000, MemoryLimitInBytes: 16 << 20},
	})
	if err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	resized := map[string][]string{
		"cpu.max":    {"210000 100000"},
		"cpu.weight": cpuWeights(1024),
		"memory.max": {strconv.Itoa(272 << 20)},
	}
	expectCgroupV2(t, "after the resize", podDir, resized)

	// 48 MiB in the app's /dev/shm, charged to the pod: a 16 MiB limit
	// (32 MiB with the overhead) is below the usage.
	if r := e.execSync(t, app, 120, "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1M", "count=48"); r.ExitCode != 0 {
		t.Fatalf("filling /dev/shm: exit %d: %s", r.ExitCode, r.Stderr)
	}
	_, err = e.rt.UpdatePodSandboxResources(rpcCtx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod.id, Resources: &runtimeapi.LinuxContainerResources{CpuQuota: 300000, MemoryLimitInBytes: 16 << 20},
	})
	if code(err) != codes.FailedPrecondition {
		t.Errorf("resize below the pod's usage: %v, want FailedPrecondition", err)
	}
	expectCgroupV2(t, "after a refused resize", podDir, resized)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
