package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pods without a pause process (sandbox_process = "auto", the default):
// a pod whose containers each have their own PID namespace (pid:
// CONTAINER, what the kubelet sends by default) gets its IPC and UTS
// namespaces pinned by podbayd, and its containers join them by path.

// nsIno is "<kind>:[<inode>]", as readlink /proc/<pid>/ns/<kind> spells
// the namespace a file pins.
func nsIno(t *testing.T, kind, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return fmt.Sprintf("%s:[%d]", kind, st.Ino)
}

// isPinned reports whether path has a namespace mounted on it.
func isPinned(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// nsenterOutput runs cmd on the host in the namespace pinned at path.
func nsenterOutput(t *testing.T, flag, path string, cmd ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{flag + "=" + path, "--"}, cmd...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter %s=%s %v: %v\n%s", flag, path, cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// sandboxProcesses lists the env's pause processes and the conmons of
// sandbox id.
func (e *env) sandboxProcesses(id string) []string {
	var out []string
	for _, l := range e.findLeaksOf(nil, "process") {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", l.pid))
		if c := strings.TrimSpace(string(comm)); c == "pause" || c == "podbay-pause" {
			out = append(out, fmt.Sprintf("%s %d", c, l.pid))
		}
	}
	for _, pid := range conmonsOf(id) {
		out = append(out, fmt.Sprintf("conmon %d", pid))
	}
	return out
}

func TestPodWithoutPause(t *testing.T) {
	if suiteRuntimeType == "vm" {
		t.Skip("vm handlers keep their sandbox")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter")
	}
	e, ti := newContainerEnv(t, "busybox")
	const shmmax = "123456789"
	pod := e.runTestPod(t, "nopause", withHostname("pinned-host"),
		withSysctls(map[string]string{"kernel.shmmax": shmmax, "net.ipv4.ip_unprivileged_port_start": "1001"}))

	st, info := e.status(t, pod.id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("state %v", st.State)
	}
	if info.SandboxKind != "pinned" || info.Pid != 0 {
		t.Fatalf("sandbox kind %q, pid %d: want pinned, 0", info.SandboxKind, info.Pid)
	}
	if !isPinned(info.Pins.IPC) || !isPinned(info.Pins.UTS) || !strings.HasPrefix(info.Pins.IPC, e.stateDir) {
		t.Fatalf("pins %+v: not mounted under the state dir %s", info.Pins, e.stateDir)
	}
	if procs := e.sandboxProcesses(pod.id); len(procs) > 0 {
		t.Errorf("a pod without a pause process has sandbox processes: %v", procs)
	}
	// podbayd itself set the hostname and the sysctls, before any
	// container ran, in the pinned namespaces.
	if h := nsenterOutput(t, "--uts", info.Pins.UTS, "hostname"); h != "pinned-host" {
		t.Errorf("hostname in the pinned UTS namespace: %q", h)
	}
	if v := nsenterOutput(t, "--ipc", info.Pins.IPC, "cat", "/proc/sys/kernel/shmmax"); v != shmmax {
		t.Errorf("kernel.shmmax in the pinned IPC namespace: %q, want %s", v, shmmax)
	}
	if v := nsenterOutput(t, "--net", info.NetworkSettings.SandboxKey, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"); v != "1001" {
		t.Errorf("net.ipv4.ip_unprivileged_port_start in the netns: %q", v)
	}

	sleeper := containerConfig("a", ti.ref("busybox"), ctrCommand("sleep", "3600"))
	a, _ := e.runContainer(t, pod, sleeper)
	b, _ := e.runContainer(t, pod, containerConfig("b", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	wantIPC, wantUTS := nsIno(t, "ipc", info.Pins.IPC), nsIno(t, "uts", info.Pins.UTS)
	wantNet := nsIno(t, "net", info.NetworkSettings.SandboxKey)
	check := func(when string) {
		t.Helper()
		for _, id := range []string{a, b} {
			for kind, want := range map[string]string{"ipc": wantIPC, "uts": wantUTS, "net": wantNet} {
				if got := e.execOutput(t, id, "readlink", "/proc/self/ns/"+kind); strings.TrimSpace(got) != want {
					t.Errorf("%s: container %s: %s namespace %s, want the pinned %s", when, short(id), kind, strings.TrimSpace(got), want)
				}
			}
			if h := strings.TrimSpace(e.execOutput(t, id, "hostname")); h != "pinned-host" {
				t.Errorf("%s: container %s: hostname %q", when, short(id), h)
			}
			if v := strings.TrimSpace(e.execOutput(t, id, "cat", "/proc/sys/kernel/shmmax")); v != shmmax {
				t.Errorf("%s: container %s: kernel.shmmax %q", when, short(id), v)
			}
		}
	}
	check("running")
	// An IPC object one container makes the other sees: a POSIX message
	// queue (each container mounts the mqueue file system of the IPC
	// namespace it joined). /dev/shm is the pod's, shared
	// (TestPodSharesShm).
	if r := e.execSync(t, a, 10, "touch", "/dev/mqueue/podq"); r.ExitCode != 0 {
		t.Fatalf("make a message queue: exit %d: %s", r.ExitCode, r.Stderr)
	}
	if ls := e.execOutput(t, b, "ls", "/dev/mqueue"); !strings.Contains(ls, "podq") {
		t.Errorf("container b does not see the message queue container a made: %q", ls)
	}
	// The pod's network counters come from its netns, with no process to
	// read /proc/<pid>/net/dev of.
	sresp, err := e.rt.PodSandboxStats(rpcCtx(t), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod.id})
	if err != nil {
		t.Fatalf("PodSandboxStats: %v", err)
	}
	if n := sresp.GetStats().GetLinux().GetNetwork(); n.GetDefaultInterface().GetName() != "eth0" {
		t.Errorf("pod network stats: %v, want eth0's", n)
	}

	// A restart finds the pod ready by its pins, its containers working.
	e.restart("")
	if st, _ := e.status(t, pod.id); st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("after restart: state %v", st.State)
	}
	check("after restart")

	e.stopPod(t, pod.id)
	if st, _ := e.status(t, pod.id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after stop: state %v", st.State)
	}
	if isPinned(info.Pins.IPC) || isPinned(info.Pins.UTS) {
		t.Errorf("after stop: pins still mounted")
	}
	e.stopPod(t, pod.id) // idempotent
	e.removePod(t, pod.id)
	for _, p := range []string{info.Pins.IPC, info.Pins.UTS} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after remove: %s: %v", p, err)
		}
	}
	e.removePod(t, pod.id)
	e.assertNoLeaks(t)

	// Killed once the namespaces are pinned: the restarted daemon undoes
	// the half-made pod, pins included.
	e.restart("run.create=kill")
	if _, err := e.tryRunPod(rpcCtx(t), e.podConfig("half-made"), ""); code(err) != codes.Unavailable {
		t.Errorf("RunPodSandbox with run.create=kill: %v, want Unavailable (daemon gone)", err)
	}
	e.waitExit(10 * time.Second)
	pinned, _ := os.ReadDir(filepath.Join(e.stateDir, "pinns"))
	if len(pinned) != 1 {
		t.Errorf("pin dirs at the crash: %d, want the half-made pod's", len(pinned))
	}
	e.restart("")
	e.eventuallyNoLeaks(t, 20*time.Second)
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("pods after the restart: %v", podIDs(pods))
	}
}

// TestPodWithoutPauseSysctlRefused: a sysctl value the kernel refuses
// fails RunPodSandbox with InvalidArgument, after the namespaces were
// pinned and the netns configured, and leaves nothing.
func TestPodWithoutPauseSysctlRefused(t *testing.T) {
	if suiteRuntimeType == "vm" {
		t.Skip("vm handlers keep their sandbox")
	}
	e := newEnv(t, envOptions{})
	e.start("")
	for _, sysctls := range []map[string]string{
		{"kernel.shmmax": "not-a-number"},
		{"kernel.shmmax": "1000", "net.ipv4.ip_unprivileged_port_start": "not-a-number"},
	} {
		_, err := e.tryRunPod(rpcCtx(t), e.podConfig("bad-sysctl", withSysctls(sysctls)), "")
		if code(err) != codes.InvalidArgument {
			t.Errorf("sysctls %v: RunPodSandbox: %v, want InvalidArgument", sysctls, err)
		}
		if pods := e.listPods(t, nil); len(pods) != 0 {
			t.Errorf("pods after the refused sysctl: %v", podIDs(pods))
		}
		e.assertNoLeaks(t)
	}
}

// TestPodWithoutPauseResize: UpdatePodSandboxResources of a pod without
// a sandbox container sets the pod's own cgroup, which holds every
// process of the pod, and has no sandbox cgroup to set.
func TestPodWithoutPauseResize(t *testing.T) {
	if suiteRuntimeType == "vm" || pureCgroupV2() {
		t.Skip("oci handlers, cgroup v1 files")
	}
	e, ti := newContainerEnv(t, "busybox")
	parent := e.cgroupChild("pinresize")
	pod := e.runTestPod(t, "pinresize", withCgroupParent(parent), func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 128 << 20}
	})
	if _, info := e.status(t, pod.id); info.SandboxKind != "pinned" {
		t.Fatalf("kind %q", info.SandboxKind)
	}
	e.runContainer(t, pod, containerConfig("app", ti.ref("busybox"), ctrCommand("sleep", "1000")))
	if _, err := e.rt.UpdatePodSandboxResources(rpcCtx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod.id,
		Resources:    &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 200000, CpuShares: 1024, MemoryLimitInBytes: 256 << 20},
		Overhead:     &runtimeapi.LinuxContainerResources{CpuQuota: 10000, MemoryLimitInBytes: 16 << 20},
	}); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	dir := e.parentDir(parent)
	for file, want := range map[string]string{
		"cpu/cpu.cfs_quota_us": "210000", "cpu/cpu.shares": "1024", "memory/memory.limit_in_bytes": fmt.Sprint(272 << 20),
	} {
		ctrl, f, _ := strings.Cut(file, "/")
		if got := strings.TrimSpace(readHostFile(t, filepath.Join("/sys/fs/cgroup", ctrl, dir, f))); got != want {
			t.Errorf("pod cgroup %s = %s, want %s", file, got, want)
		}
	}
	e.stopAndRemove(t, pod.id)
}

// TestPodWithoutPauseHostNetwork: with the host's network the pod has the
// host's UTS namespace; only its IPC namespace is pinned.
func TestPodWithoutPauseHostNetwork(t *testing.T) {
	if suiteRuntimeType == "vm" {
		t.Skip("vm handlers keep their sandbox")
	}
	e, ti := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "nopause-host", withHostNetwork())
	_, info := e.status(t, pod.id)
	if info.SandboxKind != "pinned" || info.Pins.UTS != "" || !isPinned(info.Pins.IPC) {
		t.Fatalf("kind %q, pins %+v: want only IPC pinned", info.SandboxKind, info.Pins)
	}
	id, _ := e.runContainer(t, pod, containerConfig("a", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	if got, want := strings.TrimSpace(e.execOutput(t, id, "readlink", "/proc/self/ns/ipc")), nsIno(t, "ipc", info.Pins.IPC); got != want {
		t.Errorf("ipc namespace %s, want %s", got, want)
	}
	host, _ := os.Hostname()
	if h := strings.TrimSpace(e.execOutput(t, id, "hostname")); h != host {
		t.Errorf("hostname %q, want the node's %q", h, host)
	}
	e.stopAndRemove(t, pod.id)
}

// TestPodSharingPIDKeepsPause: a pod that shares a PID namespace keeps
// the pause process (its init), and sandbox_process = "always" keeps it
// for every pod.
func TestPodSharingPIDKeepsPause(t *testing.T) {
	if suiteRuntimeType == "vm" {
		t.Skip("vm handlers keep their sandbox")
	}
	e, _ := newContainerEnvWith(t, envOptions{})
	shared := e.runTestPod(t, "shared-pid", withNamespaces(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD))
	if _, info := e.status(t, shared.id); info.SandboxKind != "pause" || info.Pid <= 0 {
		t.Errorf("pid POD: kind %q, pid %d: want the pause process", info.SandboxKind, info.Pid)
	}
	e.stopAndRemove(t, shared.id)

	always, _ := newContainerEnvWith(t, envOptions{topConfig: `sandbox_process = "always"`})
	pod := always.runTestPod(t, "always")
	if _, info := always.status(t, pod.id); info.SandboxKind != "pause" || info.Pid <= 0 {
		t.Errorf("sandbox_process always: kind %q, pid %d: want the pause process", info.SandboxKind, info.Pid)
	}
	always.stopAndRemove(t, pod.id)
}
