package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerLifecycle takes one container through create, start, exec,
// stop and remove, checking status, log and host at each step, and that the
// leak checker sees a container's resources.
func TestContainerLifecycle(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "life")
	ref := images.ref("busybox")

	cfg := containerConfig("main", ref, ctrShell("echo hello; sleep 1000"))
	id := e.createContainer(t, pod, cfg)

	st, _ := e.containerStatus(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("state after create %v, want CREATED", st.State)
	}
	if st.Id != id || st.GetMetadata().GetName() != "main" || st.GetMetadata().GetAttempt() != 0 {
		t.Errorf("status id %s metadata %v", short(st.Id), st.GetMetadata())
	}
	if st.CreatedAt == 0 || st.StartedAt != 0 || st.FinishedAt != 0 {
		t.Errorf("created container times: created %d started %d finished %d; want only created", st.CreatedAt, st.StartedAt, st.FinishedAt)
	}
	if st.GetImage().GetImage() != ref || st.ImageId != images.ids["busybox"] || st.ImageRef == "" {
		t.Errorf("status image %q, image id %q, image ref %q; want %s, the pulled ID %s, and a ref", st.GetImage().GetImage(), st.ImageId, st.ImageRef, ref, images.ids["busybox"])
	}
	logPath := filepath.Join(pod.logDir(), "main.log")
	if st.LogPath != logPath {
		t.Errorf("status log path %q, want <pod log dir>/<container log path> %s", st.LogPath, logPath)
	}
	if st.Labels["container"] != "main" {
		t.Errorf("status labels %v", st.Labels)
	}
	if got := e.listContainers(t, &runtimeapi.ContainerFilter{PodSandboxId: pod.id}); len(got) != 1 || got[0].Id != id || got[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("ListContainers in the pod: %v, want the created container", containerIDs(got))
	}

	e.startContainer(t, id)
	st = e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
	if st.StartedAt == 0 || st.StartedAt < st.CreatedAt {
		t.Errorf("running container: started_at %d, created_at %d", st.StartedAt, st.CreatedAt)
	}
	_, info := e.containerStatus(t, id)
	if !pidAlive(info.Pid) {
		t.Fatalf("pid %d from the verbose status is not running", info.Pid)
	}
	if spec := e.containerRuntimeSpec(t, id); !slices.Equal(spec.Process.Args, []string{"sh", "-c", "echo hello; sleep 1000"}) {
		t.Errorf("runtime spec args %q", spec.Process.Args)
	}
	// The container joins the pod's network namespace (the sandbox key)
	// and its IPC and UTS namespaces (pinned, or the pause process's).
	_, podInfo := e.status(t, pod.id)
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", info.Pid)), nsInode(t, e.netnsPath(pod.id)); got != want {
		t.Errorf("container network namespace %d, sandbox key %d", got, want)
	}
	for _, ns := range []string{"ipc", "uts"} {
		if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/%s", info.Pid, ns)), nsInode(t, podNSPath(podInfo, ns)); got != want {
			t.Errorf("container %s namespace %d, the pod's %d", ns, got, want)
		}
	}
	if len(e.monitorsOf(id)) != 1 {
		t.Errorf("monitors (conmon, or the pod's shim) of the running container: %v, want one", e.monitorsOf(id))
	}

	if r := e.execSync(t, id, 10, "echo", "hi"); string(r.Stdout) != "hi\n" || len(r.Stderr) != 0 || r.ExitCode != 0 {
		t.Errorf("ExecSync echo hi: stdout %q stderr %q exit %d", r.Stdout, r.Stderr, r.ExitCode)
	}
	if r := e.execSync(t, id, 10, "sh", "-c", "echo out; echo err >&2; exit 3"); string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.ExitCode != 3 {
		t.Errorf("ExecSync with both streams: stdout %q stderr %q exit %d; want out, err, 3", r.Stdout, r.Stderr, r.ExitCode)
	}

	line := waitLogLine(t, logPath, "stdout", "hello", 10*time.Second)
	if line.time.Before(time.Unix(0, st.CreatedAt).Add(-time.Minute)) {
		t.Errorf("log line time %v is long before the container was created", line.time)
	}
	raw := readFile(t, logPath)
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d) stdout F hello$`).MatchString(raw) {
		t.Errorf("log %s has no line \"<RFC3339Nano> stdout F hello\":\n%s", logPath, raw)
	}

	// The leak checker sees the running container's resources unless its
	// pod is kept.
	e.requireLeakCheckerSeesContainer(t, pod.id, id)

	// sh is PID 1 and does not handle SIGTERM: killed after the timeout.
	e.stopContainer(t, id, 2)
	st = e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
	if st.ExitCode != 137 || st.Reason != "Error" {
		t.Errorf("after stop: exit code %d reason %q, want 137 Error (SIGKILL)", st.ExitCode, st.Reason)
	}
	if st.FinishedAt == 0 || st.FinishedAt < st.StartedAt {
		t.Errorf("after stop: finished_at %d, started_at %d", st.FinishedAt, st.StartedAt)
	}
	if pidAlive(info.Pid) {
		t.Errorf("pid %d still running after StopContainer", info.Pid)
	}
	e.stopContainer(t, id, 2)
	if st2, _ := e.containerStatus(t, id); st2.State != runtimeapi.ContainerState_CONTAINER_EXITED || st2.ExitCode != 137 || st2.FinishedAt != st.FinishedAt {
		t.Errorf("a second stop changed the status: %v exit %d finished %d", st2.State, st2.ExitCode, st2.FinishedAt)
	}
	if _, err := e.rt.StopContainer(rpcCtx(t), &runtimeapi.StopContainerRequest{ContainerId: randHex(32), Timeout: 1}); err != nil {
		t.Errorf("StopContainer of an unknown ID: %v, want OK", err)
	}

	e.removeContainer(t, id)
	if _, _, err := e.tryContainerStatus(rpcCtx(t), id); code(err) != codes.NotFound {
		t.Errorf("ContainerStatus after remove: %v, want NotFound", err)
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("ListContainers after remove: %v", containerIDs(got))
	}
	e.removeContainer(t, id)
	if _, err := e.rt.RemoveContainer(rpcCtx(t), &runtimeapi.RemoveContainerRequest{ContainerId: randHex(32)}); err != nil {
		t.Errorf("RemoveContainer of an unknown ID: %v, want OK", err)
	}
	e.requireNoMonitor(t, id)
	e.assertNoLeaksExcept(t, pod.id)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerExitReasons: a container's exit code and reason come from
// how it ended: by itself with 0 or not, or killed for lack of memory.
func TestContainerExitReasons(t *testing.T) {
	e, images := newContainerEnv(t, "busybox", "config")
	pod := e.runTestPod(t, "exits")
	ref := images.ref("busybox")

	// The shell (PID 1) holds 64 MiB in a variable: more than its limit.
	const limit = 8 << 20
	oom := containerConfig("oom", ref, ctrMemoryLimit(limit),
		ctrShell("x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo survived ${#x}; exit 0"))
	cases := []struct {
		cfg    *runtimeapi.ContainerConfig
		code   int32
		reason string
	}{
		{containerConfig("zero", ref, ctrShell("exit 0")), 0, "Completed"},
		{containerConfig("seven", ref, ctrShell("sleep 1; exit 7")), 7, "Error"},
		{oom, 137, "OOMKilled"},
	}
	ids := make([]string, len(cases))
	for i, tc := range cases {
		ids[i] = e.createContainer(t, pod, tc.cfg)
		e.startContainer(t, ids[i])
	}
	for i, tc := range cases {
		name := tc.cfg.Metadata.Name
		st := e.waitContainerState(t, ids[i], runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
		if st.ExitCode != tc.code || st.Reason != tc.reason {
			t.Errorf("%s: exit code %d reason %q, want %d %q\n%s", name, st.ExitCode, st.Reason, tc.code, tc.reason, e.containerLogTail(st))
		}
		if st.FinishedAt == 0 || st.FinishedAt < st.StartedAt {
			t.Errorf("%s: finished_at %d, started_at %d", name, st.FinishedAt, st.StartedAt)
		}
		// An exited container is listed as such.
		if got := e.listContainers(t, &runtimeapi.ContainerFilter{Id: ids[i]}); len(got) != 1 || got[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("%s: listed as %v", name, containerIDs(got))
		}
	}
	for _, id := range ids {
		e.removeContainer(t, id)
	}

	// StopContainer sends the image's stop signal (config: SIGUSR1), which
	// the container handles, before any SIGKILL.
	trapper := containerConfig("stop-signal", images.ref("config"), ctrShell(
		"trap 'echo got USR1; exit 3' USR1; trap 'echo got TERM; exit 4' TERM; echo ready; while true; do sleep 0.1; done"))
	id, _ := e.runContainer(t, pod, trapper)
	st, _ := e.containerStatus(t, id)
	waitLogLine(t, st.LogPath, "stdout", "ready", 10*time.Second)
	e.stopContainer(t, id, 20)
	st = e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
	if st.ExitCode != 3 || st.Reason != "Error" {
		t.Errorf("stopped with the image's stop signal SIGUSR1: exit code %d reason %q, want 3 Error\n%s", st.ExitCode, st.Reason, e.containerLogTail(st))
	}
	e.removeContainer(t, id)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerExecTimeout: an exec that outlives its timeout is reported
// as timed out and leaves no process behind; the container goes on.
func TestContainerExecTimeout(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "exec")
	id, pid := e.runContainer(t, pod, containerConfig("main", images.ref("busybox"), ctrCommand("sleep", "1000")))

	// The call must come back long before the command would end.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := e.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "100"}, Timeout: 1})
	switch {
	case code(err) == codes.DeadlineExceeded && ctx.Err() != nil:
		t.Fatalf("ExecSync with timeout 1 s did not return within 30 s")
	case err != nil:
		t.Logf("ExecSync past its timeout: error %v", err)
	case resp.ExitCode != -1 || !strings.Contains(string(resp.Stderr), "command timed out"):
		t.Errorf("ExecSync past its timeout: exit %d stderr %q, want -1 and \"command timed out\"", resp.ExitCode, resp.Stderr)
	}

	// No sleep 100 is left, seen from the host (any process in the
	// container's PID namespace) and from inside.
	pidns := nsInode(t, fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err := eventually(settleTime, func() error {
		for _, p := range readProcs() {
			var st syscall.Stat_t
			if p.cmdline != "sleep 100" || p.state == "Z" || syscall.Stat(fmt.Sprintf("/proc/%d/ns/pid", p.pid), &st) != nil {
				continue
			}
			if st.Ino == pidns {
				return fmt.Errorf("pid %d (%s) still running", p.pid, p.cmdline)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("the timed-out exec's process: %v", err)
	}
	if out := e.execOutput(t, id, "ps", "-o", "args"); containsLine(out, "sleep 100") {
		t.Errorf("ps in the container after the timed-out exec:\n%s", out)
	}
	if st, _ := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after the timed-out exec, want RUNNING", st.State)
	}
	if r := e.execSync(t, id, 10, "echo", "still"); string(r.Stdout) != "still\n" || r.ExitCode != 0 {
		t.Errorf("ExecSync after the timeout: %q exit %d", r.Stdout, r.ExitCode)
	}
	if r := e.execSync(t, id, 10, "sh", "-c", "exit 0"); r.ExitCode != 0 {
		t.Errorf("ExecSync exit 0 after the timeout: exit %d", r.ExitCode)
	}

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerLogReopen: after the kubelet renames a container's log,
// ReopenContainerLog makes conmon write a new file at the log path, and no
// line is lost.
func TestContainerLogReopen(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "logs")
	id, _ := e.runContainer(t, pod, containerConfig("ticker", images.ref("busybox"),
		ctrShell("i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done")))
	st, _ := e.containerStatus(t, id)
	path, rotated := st.LogPath, st.LogPath+".1"
	waitLogLine(t, path, "stdout", "line 3", 10*time.Second)

	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	// conmon still writes to the renamed file until told.
	lineNumber := func(l criLogLine) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(l.content, "line "))
		return n
	}
	lastIn := func(p string) int {
		lines, err := readCRILog(p)
		if err != nil || len(lines) == 0 {
			return 0
		}
		return lineNumber(lines[len(lines)-1])
	}
	before := lastIn(rotated)
	if err := eventually(5*time.Second, func() error {
		if lastIn(rotated) <= before {
			return fmt.Errorf("renamed log stays at line %d", before)
		}
		return nil
	}); err != nil {
		t.Errorf("before the reopen: %v", err)
	}

	if _, err := e.rt.ReopenContainerLog(rpcCtx(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	var fresh []criLogLine
	if err := eventually(10*time.Second, func() error {
		var err error
		if fresh, err = readCRILog(path); err != nil {
			return err
		}
		if len(fresh) < 3 {
			return fmt.Errorf("%d lines", len(fresh))
		}
		return nil
	}); err != nil {
		t.Fatalf("no new log at %s after ReopenContainerLog: %v", path, err)
	}
	old, err := readCRILog(rotated)
	if err != nil {
		t.Fatal(err)
	}
	oldLast, newFirst := lineNumber(old[len(old)-1]), lineNumber(fresh[0])
	if newFirst != oldLast+1 {
		t.Errorf("the rotated log ends at line %d, the new one starts at line %d: want consecutive", oldLast, newFirst)
	}
	for i, l := range fresh {
		if l.stream != "stdout" || l.tag != "F" || lineNumber(l) != newFirst+i {
			t.Errorf("new log line %d: %+v", i, l)
		}
	}
	// The renamed file is no longer written to.
	if got := lastIn(rotated); got != oldLast {
		t.Errorf("the rotated log grew from line %d to %d after the reopen", oldLast, got)
	}

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerUpdateResources: a new memory limit and CPU shares reach
// the container's cgroup.
func TestContainerUpdateResources(t *testing.T) {
	if pureCgroupV2() {
		t.Skip("reads cgroup v1 files; TestCgroupV2ContainerResources is its cgroup v2 twin")
	}
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "update")
	cfg := containerConfig("main", images.ref("busybox"), ctrMemoryLimit(64<<20), ctrCommand("sleep", "1000"))
	cfg.Linux.Resources.CpuShares = 256
	id, pid := e.runContainer(t, pod, cfg)

	inside := func() string {
		return strings.TrimSpace(e.execOutput(t, id, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"))
	}
	if got := cgroupFile(t, pid, "memory", "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Errorf("memory limit at start: %s, want %d", got, 64<<20)
	}
	if got := cgroupFile(t, pid, "cpu", "cpu.shares"); got != "256" {
		t.Errorf("cpu shares at start: %s, want 256", got)
	}

	_, err := e.rt.UpdateContainerResources(rpcCtx(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuShares: 512},
	})
	if err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	if got := cgroupFile(t, pid, "memory", "memory.limit_in_bytes"); got != strconv.Itoa(128<<20) {
		t.Errorf("memory limit after the update, from the host: %s, want %d", got, 128<<20)
	}
	if got := inside(); got != strconv.Itoa(128<<20) {
		t.Errorf("memory limit after the update, from the container: %s, want %d", got, 128<<20)
	}
	if got := cgroupFile(t, pid, "cpu", "cpu.shares"); got != "512" {
		t.Errorf("cpu shares after the update: %s, want 512", got)
	}
	if st, _ := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after the update", st.State)
	}

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerStatusResources: ContainerStatus reports the container's
// current limits, at create and after UpdateContainerResources, as the
// kubelet's in-place resize compares them with what it asked for (without
// them it fills the status from its own allocation, and a pod without a
// memory request reports one of "0": node e2e's Pod InPlace Resize specs).
func TestContainerStatusResources(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "status-resources")
	cfg := containerConfig("main", images.ref("busybox"), ctrMemoryLimit(64<<20), ctrCommand("sleep", "1000"))
	cfg.Linux.Resources.CpuShares = 256
	cfg.Linux.Resources.CpuPeriod = 100000
	cfg.Linux.Resources.CpuQuota = 50000
	id, _ := e.runContainer(t, pod, cfg)

	check := func(when string, want *runtimeapi.LinuxContainerResources) {
		t.Helper()
		st, _ := e.containerStatus(t, id)
		got := st.GetResources().GetLinux()
		if got == nil {
			t.Errorf("%s: ContainerStatus has no resources", when)
			return
		}
		if got.CpuShares != want.CpuShares || got.CpuPeriod != want.CpuPeriod || got.CpuQuota != want.CpuQuota ||
			got.MemoryLimitInBytes != want.MemoryLimitInBytes {
			t.Errorf("%s: resources shares %d period %d quota %d memory %d, want %d %d %d %d", when,
				got.CpuShares, got.CpuPeriod, got.CpuQuota, got.MemoryLimitInBytes,
				want.CpuShares, want.CpuPeriod, want.CpuQuota, want.MemoryLimitInBytes)
		}
	}
	check("after create", &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 64 << 20})

	_, err := e.rt.UpdateContainerResources(rpcCtx(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuShares: 512, CpuPeriod: 100000, CpuQuota: 150000},
	})
	if err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	check("after the update", &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 150000, MemoryLimitInBytes: 128 << 20})

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerStatusImageName: when one image has two names, each
// container's status names the image its pod asked for
// (user_specified_image), as the kubelet compares it with the pod's spec
// (node e2e: a container restarted with an updated image waits for its
// status to name that image).
func TestContainerStatusImageName(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	other := defaultSpec(t, "test", "busybox")
	other.Repository = "test/busybox-again"
	push(t, images.reg, other)
	otherRef := images.reg.Reference("test/busybox-again:latest")
	if id := e.pullImage(t, otherRef, nil); id != images.ids["busybox"] {
		t.Fatalf("the same content under two names has two IDs: %s, %s", id, images.ids["busybox"])
	}
	pod := e.runTestPod(t, "image-name")
	for i, ref := range []string{images.ref("busybox"), otherRef} {
		cfg := containerConfig(fmt.Sprintf("c%d", i), ref, ctrCommand("sleep", "1000"))
		// What the kubelet sends: the image's ID, and the pod's name for it.
		cfg.Image = &runtimeapi.ImageSpec{Image: images.ids["busybox"], UserSpecifiedImage: ref}
		id, _ := e.runContainer(t, pod, cfg)
		if st, _ := e.containerStatus(t, id); st.GetImage().GetImage() != ref {
			t.Errorf("container created from %s: status image %q", ref, st.GetImage().GetImage())
		}
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerStats: container and pod statistics report CPU, memory,
// the writable layer and the pod's network, filtered by pod.
func TestContainerStats(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	a := e.runTestPod(t, "stats-a")
	b := e.runTestPod(t, "stats-b")
	busy := "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 1000"
	ca, _ := e.runContainer(t, a, containerConfig("worker", ref, ctrShell(busy), ctrLabel("stats", "a")))
	cb, _ := e.runContainer(t, b, containerConfig("worker", ref, ctrShell(busy)))

	stats := func(id string) *runtimeapi.ContainerStats {
		resp, err := e.rt.ContainerStats(rpcCtx(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStats %s: %v", short(id), err)
		}
		return resp.Stats
	}
	var st *runtimeapi.ContainerStats
	if err := eventually(10*time.Second, func() error {
		st = stats(ca)
		switch {
		case st.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0:
			return fmt.Errorf("cpu usage 0")
		case st.GetMemory().GetWorkingSetBytes().GetValue() == 0:
			return fmt.Errorf("memory working set 0")
		case st.GetWritableLayer() == nil:
			return fmt.Errorf("no writable layer")
		}
		return nil
	}); err != nil {
		t.Errorf("ContainerStats of a running container: %v: %v", err, st)
	}
	if st.GetAttributes().GetId() != ca || st.GetAttributes().GetMetadata().GetName() != "worker" {
		t.Errorf("stats attributes %v", st.GetAttributes())
	}

	usedBefore := st.GetWritableLayer().GetUsedBytes().GetValue()
	e.execOutput(t, ca, "sh", "-c", "dd if=/dev/urandom of=/written bs=1M count=8 2>/dev/null && sync")
	if err := eventually(10*time.Second, func() error {
		if used := stats(ca).GetWritableLayer().GetUsedBytes().GetValue(); used < usedBefore+7<<20 {
			return fmt.Errorf("writable layer uses %d bytes, %d before writing 8 MiB", used, usedBefore)
		}
		return nil
	}); err != nil {
		t.Errorf("ContainerStats writable layer: %v", err)
	}

	list := func(f *runtimeapi.ContainerStatsFilter) []string {
		resp, err := e.rt.ListContainerStats(rpcCtx(t), &runtimeapi.ListContainerStatsRequest{Filter: f})
		if err != nil {
			t.Fatalf("ListContainerStats %v: %v", f, err)
		}
		var ids []string
		for _, s := range resp.Stats {
			ids = append(ids, s.GetAttributes().GetId())
		}
		slices.Sort(ids)
		return ids
	}
	both := []string{ca, cb}
	slices.Sort(both)
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"no filter", nil, both},
		{"pod a", &runtimeapi.ContainerStatsFilter{PodSandboxId: a.id}, []string{ca}},
		{"pod b", &runtimeapi.ContainerStatsFilter{PodSandboxId: b.id}, []string{cb}},
		{"container id", &runtimeapi.ContainerStatsFilter{Id: cb}, []string{cb}},
		{"label", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"stats": "a"}}, []string{ca}},
		{"unknown pod", &runtimeapi.ContainerStatsFilter{PodSandboxId: randHex(32)}, nil},
	} {
		if got := list(tc.filter); !slices.Equal(got, tc.want) {
			t.Errorf("ListContainerStats %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	resp, err := e.rt.PodSandboxStats(rpcCtx(t), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: a.id})
	if err != nil {
		t.Fatalf("PodSandboxStats: %v", err)
	}
	ps := resp.Stats
	if ps.GetAttributes().GetId() != a.id {
		t.Errorf("pod stats attributes %v", ps.GetAttributes())
	}
	var cids []string
	for _, c := range ps.GetLinux().GetContainers() {
		cids = append(cids, c.GetAttributes().GetId())
	}
	if !slices.Equal(cids, []string{ca}) {
		t.Errorf("PodSandboxStats containers %v, want [%s]", cids, ca)
	}
	if ps.GetLinux().GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 || ps.GetLinux().GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("pod cpu %v memory %v: want usage", ps.GetLinux().GetCpu(), ps.GetLinux().GetMemory())
	}
	netw := ps.GetLinux().GetNetwork()
	names := []string{netw.GetDefaultInterface().GetName()}
	for _, i := range netw.GetInterfaces() {
		names = append(names, i.GetName())
	}
	if !slices.Contains(names, "eth0") {
		t.Errorf("PodSandboxStats network interfaces %v, want eth0", names)
	}

	lresp, err := e.rt.ListPodSandboxStats(rpcCtx(t), &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: b.id}})
	if err != nil {
		t.Fatalf("ListPodSandboxStats: %v", err)
	}
	if len(lresp.Stats) != 1 || lresp.Stats[0].GetAttributes().GetId() != b.id {
		t.Errorf("ListPodSandboxStats for pod b: %d entries", len(lresp.Stats))
	} else if cs := lresp.Stats[0].GetLinux().GetContainers(); len(cs) != 1 || cs[0].GetAttributes().GetId() != cb {
		t.Errorf("ListPodSandboxStats for pod b: containers %v", cs)
	}

	e.stopAndRemove(t, a.id, b.id)
	e.assertNoLeaks(t)
}

// TestContainerPodConsistency: listing filters, and a pod's containers
// follow the pod: stopped with it, removed with it, and no new one in a
// stopped pod.
func TestContainerPodConsistency(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	a := e.runTestPod(t, "pod-a")
	b := e.runTestPod(t, "pod-b")
	run1, pid1 := e.runContainer(t, a, containerConfig("run1", ref, ctrCommand("sleep", "1000"), ctrLabel("tier", "web")))
	run2, pid2 := e.runContainer(t, a, containerConfig("run2", ref, ctrShell("trap 'exit 0' TERM; sleep 1000 & wait")))
	created := e.createContainer(t, a, containerConfig("created", ref, ctrCommand("sleep", "1000")))
	other, _ := e.runContainer(t, b, containerConfig("other", ref, ctrCommand("sleep", "1000"), ctrLabel("tier", "web")))

	ids := func(cs []*runtimeapi.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Id)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"all", nil, sorted(run1, run2, created, other)},
		{"pod a", &runtimeapi.ContainerFilter{PodSandboxId: a.id}, sorted(run1, run2, created)},
		{"running", &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: running}}, sorted(run1, run2, other)},
		{"created", &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}, []string{created}},
		{"id prefix", &runtimeapi.ContainerFilter{Id: run2[:12]}, []string{run2}},
		{"label", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"tier": "web"}}, sorted(run1, other)},
		{"label and pod", &runtimeapi.ContainerFilter{PodSandboxId: b.id, LabelSelector: map[string]string{"tier": "web"}}, []string{other}},
		{"pod and state", &runtimeapi.ContainerFilter{PodSandboxId: b.id, State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}, nil},
	} {
		if got := ids(e.listContainers(t, tc.filter)); !slices.Equal(got, tc.want) {
			t.Errorf("ListContainers %s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, c := range e.listContainers(t, &runtimeapi.ContainerFilter{Id: run1}) {
		if c.PodSandboxId != a.id || c.GetMetadata().GetName() != "run1" || c.CreatedAt == 0 || c.GetImage().GetImage() == "" || c.Labels["tier"] != "web" {
			t.Errorf("listed container %+v", c)
		}
	}

	e.stopPod(t, a.id)
	for _, id := range []string{run1, run2, created} {
		st, _ := e.containerStatus(t, id)
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s is %v after StopPodSandbox, want EXITED", short(id), st.State)
		}
	}
	for _, pid := range []int{pid1, pid2} {
		if pidAlive(pid) {
			t.Errorf("pid %d still running after StopPodSandbox", pid)
		}
	}
	if st, _ := e.containerStatus(t, other); st.State != running {
		t.Errorf("the other pod's container is %v after StopPodSandbox of pod a", st.State)
	}

	_, err := e.tryCreateContainer(rpcCtx(t), a, containerConfig("late", ref, ctrCommand("sleep", "1000")))
	if code(err) != codes.FailedPrecondition {
		t.Errorf("CreateContainer in a stopped pod: %v, want FailedPrecondition", err)
	}
	if got := ids(e.listContainers(t, &runtimeapi.ContainerFilter{PodSandboxId: a.id})); !slices.Equal(got, sorted(run1, run2, created)) {
		t.Errorf("containers of the stopped pod: %v", got)
	}

	e.removePod(t, a.id)
	if got := e.listContainers(t, &runtimeapi.ContainerFilter{PodSandboxId: a.id}); len(got) != 0 {
		t.Errorf("containers of the removed pod: %v", containerIDs(got))
	}
	for _, id := range []string{run1, run2, created} {
		if _, _, err := e.tryContainerStatus(rpcCtx(t), id); code(err) != codes.NotFound {
			t.Errorf("ContainerStatus of %s after RemovePodSandbox: %v, want NotFound", short(id), err)
		}
		e.requireNoMonitor(t, id)
	}
	e.assertNoLeaksExcept(t, b.id)

	e.stopAndRemove(t, b.id)
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after every pod was removed: %v", containerIDs(got))
	}
	e.assertNoLeaks(t)
}

// TestContainerRestart: containers outlive a daemon crash; exits that
// happen while it is down are reported afterwards with their exit code and
// time; running and created containers can still be used.
func TestContainerRestart(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "restart")
	trigger := t.TempDir()

	survivor, survivorPid := e.runContainer(t, pod, containerConfig("survivor", ref, ctrCommand("sleep", "1000")))
	victim, victimPid := e.runContainer(t, pod, containerConfig("victim", ref, ctrCommand("sleep", "1000")))
	// Exits 5 once the host creates <trigger>/go.
	selfExit, selfPid := e.runContainer(t, pod, containerConfig("self-exit", ref, ctrMount(trigger, "/trigger", true),
		ctrShell("while [ ! -e /trigger/go ]; do sleep 0.1; done; exit 5")))
	created := e.createContainer(t, pod, containerConfig("created", ref, ctrCommand("sleep", "1000")))

	e.kill9()
	if err := os.WriteFile(filepath.Join(trigger, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(victimPid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the victim's pid %d: %v", victimPid, err)
	}
	waitGone(t, victimPid, 10*time.Second)
	waitGone(t, selfPid, 10*time.Second)
	// conmon writes the exit code and leaves.
	for _, id := range []string{victim, selfExit} {
		e.requireNoMonitor(t, id)
	}
	downUntil := time.Now()

	e.restart("")
	for _, tc := range []struct {
		id     string
		name   string
		code   int32
		reason string
	}{
		{victim, "victim (killed by the host)", 137, "Error"},
		{selfExit, "self-exit", 5, "Error"},
	} {
		st := e.waitContainerState(t, tc.id, runtimeapi.ContainerState_CONTAINER_EXITED, containerStateTimeout)
		if st.ExitCode != tc.code || st.Reason != tc.reason {
			t.Errorf("%s after the restart: exit code %d reason %q, want %d %q", tc.name, st.ExitCode, st.Reason, tc.code, tc.reason)
		}
		if st.FinishedAt == 0 || st.FinishedAt < st.StartedAt || st.FinishedAt > downUntil.UnixNano() {
			t.Errorf("%s after the restart: finished_at %v, started_at %v; want the exit time, before %v",
				tc.name, time.Unix(0, st.FinishedAt), time.Unix(0, st.StartedAt), downUntil)
		}
	}
	st, info := e.containerStatus(t, survivor)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || info.Pid != survivorPid || !pidAlive(survivorPid) {
		t.Errorf("survivor after the restart: %v pid %d (was %d, alive %v)", st.State, info.Pid, survivorPid, pidAlive(survivorPid))
	}
	if got := e.execOutput(t, survivor, "echo", "alive"); got != "alive\n" {
		t.Errorf("ExecSync in the survivor after the restart: %q", got)
	}
	if st, _ := e.containerStatus(t, created); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("created container after the restart: %v, want CREATED", st.State)
	}
	e.startContainer(t, created)
	e.waitContainerState(t, created, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
	e.assertNoLeaksExcept(t, pod.id)

	e.stopContainer(t, survivor, 0)
	if st := e.waitContainerState(t, survivor, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout); st.ExitCode != 137 {
		t.Errorf("survivor stopped with timeout 0: exit code %d, want 137", st.ExitCode)
	}
	for _, id := range []string{survivor, victim, selfExit, created} {
		e.removeContainer(t, id)
		e.requireNoMonitor(t, id)
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after removing them all: %v", containerIDs(got))
	}
	e.assertNoLeaksExcept(t, pod.id)

	// Killed once the runtime has created the container, before the
	// record says so: the restarted daemon undoes it, and the name is
	// free.
	e.restart("container.create=kill")
	half := containerConfig("half-made", ref, ctrCommand("sleep", "1000"))
	if _, err := e.tryCreateContainer(rpcCtx(t), pod, half); code(err) != codes.Unavailable {
		t.Errorf("CreateContainer with container.create=kill: %v, want Unavailable (daemon gone)", err)
	}
	e.waitExit(10 * time.Second)
	halfMade := ""
	for _, r := range e.createRecords() {
		if r.Annotations["io.kubernetes.cri.container-name"] == "half-made" {
			halfMade = r.ContainerID
		}
	}
	if halfMade == "" || len(e.monitorsOf(halfMade)) == 0 {
		t.Errorf("the runtime did not create the half-made container (%q) before the crash, or its monitor is gone", short(halfMade))
	}
	e.restart("")
	e.eventuallyNoLeaks(t, 20*time.Second, pod.id)
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after the restart: %v", containerIDs(got))
	}
	if halfMade != "" {
		e.requireNoMonitor(t, halfMade)
	}
	id, _ := e.runContainer(t, pod, half)
	e.removeContainer(t, id)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestContainerBadInput: malformed requests, an unknown pod, an absent
// image and a taken name are refused with the right code and leave
// nothing behind; a failed runtime create or start is rolled back and the
// name can be used again.
func TestContainerBadInput(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "bad")
	good := func(mods ...ctrMod) *runtimeapi.ContainerConfig {
		return containerConfig("c", ref, append([]ctrMod{ctrCommand("sleep", "1000")}, mods...)...)
	}

	for _, tc := range []struct {
		name string
		pod  testPod
		cfg  *runtimeapi.ContainerConfig
		want codes.Code
	}{
		{"nil config", pod, nil, codes.InvalidArgument},
		{"no metadata", pod, good(func(c *runtimeapi.ContainerConfig) { c.Metadata = nil }), codes.InvalidArgument},
		{"empty name", pod, good(func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "" }), codes.InvalidArgument},
		{"no image", pod, good(func(c *runtimeapi.ContainerConfig) { c.Image = nil }), codes.InvalidArgument},
		{"empty image", pod, good(func(c *runtimeapi.ContainerConfig) { c.Image.Image = "" }), codes.InvalidArgument},
		{"absolute log path", pod, good(func(c *runtimeapi.ContainerConfig) { c.LogPath = filepath.Join(e.dir, "abs.log") }), codes.InvalidArgument},
		{"unknown pod", testPod{id: randHex(32), cfg: pod.cfg}, good(), codes.NotFound},
		{"image not pulled", pod, containerConfig("c", images.ref("user-name"), ctrCommand("sleep", "1000")), codes.NotFound},
		{"image unknown", pod, containerConfig("c", images.reg.Reference("test/absent:latest"), ctrCommand("sleep", "1000")), codes.NotFound},
	} {
		id, err := e.tryCreateContainer(rpcCtx(t), tc.pod, tc.cfg)
		if code(err) != tc.want {
			t.Errorf("CreateContainer with %s: %q, %v; want %v", tc.name, short(id), err, tc.want)
		}
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after the refused creates: %v", containerIDs(got))
	}
	if _, err := os.Stat(filepath.Join(e.dir, "abs.log")); err == nil {
		t.Errorf("a refused create wrote the absolute log path")
	}
	e.assertNoLeaksExcept(t, pod.id)

	// Unknown containers.
	unknown := randHex(32)
	if _, err := e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: unknown}); code(err) != codes.NotFound {
		t.Errorf("StartContainer of an unknown ID: %v, want NotFound", err)
	}
	if _, _, err := e.tryContainerStatus(rpcCtx(t), unknown); code(err) != codes.NotFound {
		t.Errorf("ContainerStatus of an unknown ID: %v, want NotFound", err)
	}
	if _, err := e.rt.ExecSync(rpcCtx(t), &runtimeapi.ExecSyncRequest{ContainerId: unknown, Cmd: []string{"true"}, Timeout: 5}); code(err) != codes.NotFound {
		t.Errorf("ExecSync in an unknown container: %v, want NotFound", err)
	}

	// A name is reserved until the container is removed; another attempt
	// is another name.
	first := e.createContainer(t, pod, good())
	if _, err := e.tryCreateContainer(rpcCtx(t), pod, good()); code(err) != codes.AlreadyExists {
		t.Errorf("CreateContainer with a taken name: %v, want AlreadyExists", err)
	}
	second := e.createContainer(t, pod, good(ctrAttempt(1)))
	if _, err := e.rt.ExecSync(rpcCtx(t), &runtimeapi.ExecSyncRequest{ContainerId: first, Cmd: []string{"true"}, Timeout: 5}); code(err) == codes.OK {
		t.Errorf("ExecSync in a container that was never started succeeded")
	}
	e.removeContainer(t, first)
	again := e.createContainer(t, pod, good())
	e.removeContainer(t, again)
	e.removeContainer(t, second)

	// The runtime fails to create: rolled back, name free again.
	e.failRuntime("create")
	if id, err := e.tryCreateContainer(rpcCtx(t), pod, good()); err == nil {
		t.Errorf("CreateContainer succeeded with a failing runtime create: %s", short(id))
	}
	e.clearFailures()
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after a failed runtime create: %v", containerIDs(got))
	}
	e.assertNoLeaksExcept(t, pod.id)

	// The daemon fails after the runtime created the container.
	e.stop()
	e.start("container.create=1*error")
	if id, err := e.tryCreateContainer(rpcCtx(t), pod, good()); err == nil {
		t.Errorf("CreateContainer succeeded with container.create=error: %s", short(id))
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after a failed create: %v", containerIDs(got))
	}
	e.assertNoLeaksExcept(t, pod.id)

	// The runtime fails to start: reported, and the container removable.
	id := e.createContainer(t, pod, good())
	e.failRuntime("start")
	if _, err := e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil {
		t.Errorf("StartContainer succeeded with a failing runtime start")
	}
	e.clearFailures()
	if st, _ := e.containerStatus(t, id); st.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container RUNNING after a failed start")
	}
	e.removeContainer(t, id)
	e.requireNoMonitor(t, id)

	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers at the end: %v", containerIDs(got))
	}
	e.assertNoLeaksExcept(t, pod.id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
