package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/netns"
)

// TestRestartRecovery kills podbayd with pods running, changes the host
// behind its back, and checks what the restarted daemon makes of it.
func TestRestartRecovery(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	// The survivors have no pause process (pinned namespaces); the victim
	// keeps one, to die while the daemon is down.
	cniPod := e.runPod(t, e.podConfig("survivor"), "")
	hostPod := e.runPod(t, e.podConfig("survivor-host", withHostNetwork()), "")
	victim := e.runPod(t, e.podConfig("victim", withPause()), "")
	before := map[string]*runtimeapi.PodSandboxStatus{}
	pids := map[string]int{}
	for _, id := range []string{cniPod, hostPod, victim} {
		st, info := e.status(t, id)
		before[id], pids[id] = st, info.Pid
	}

	if pids[victim] <= 0 {
		t.Fatalf("victim's pause pid %d", pids[victim])
	}
	e.kill9()

	// While the daemon is down: the victim's pause process dies, and
	// podbay-named resources appear that no record owns.
	if err := syscall.Kill(pids[victim], syscall.SIGKILL); err != nil {
		t.Fatalf("kill victim's pause %d: %v", pids[victim], err)
	}
	waitGone(t, pids[victim], 10*time.Second)
	if err := netns.Pin(e.netnsPath(randHex(32))); err != nil {
		t.Fatal(err)
	}
	orphanAttachment := e.orphanCNIAttachment(t)

	e.restart("")

	pods := e.listPods(t, nil)
	if len(pods) != 3 {
		t.Fatalf("after restart List has %v, want the 3 pods", podIDs(pods))
	}
	for _, id := range []string{cniPod, hostPod} {
		st, info := e.status(t, id)
		if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("%s: state %v after restart, want READY", st.GetMetadata().GetName(), st.State)
		}
		if podIP(st) != podIP(before[id]) {
			t.Errorf("%s: IP %q after restart, was %q", st.GetMetadata().GetName(), podIP(st), podIP(before[id]))
		}
		if info.Pid != pids[id] || (pids[id] > 0 && !pidAlive(info.Pid)) {
			t.Errorf("%s: pause pid %d after restart (alive %v), was %d", st.GetMetadata().GetName(), info.Pid, pidAlive(info.Pid), pids[id])
		}
		if info.Pid == 0 && (info.SandboxKind != "pinned" || (info.Pins.IPC != "" && !isPinned(info.Pins.IPC))) {
			t.Errorf("%s: kind %q, pins %+v after restart", st.GetMetadata().GetName(), info.SandboxKind, info.Pins)
		}
	}
	requirePing(t, podIP(before[cniPod]))
	if err := eventually(10*time.Second, func() error {
		st, _ := e.status(t, victim)
		if st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			return fmt.Errorf("victim: state %v after its pause process died, want NOTREADY", st.State)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// The orphans are collected; the three pods keep what they own.
	e.eventuallyNoLeaks(t, 20*time.Second, cniPod, hostPod, victim)
	if owners := e.ipamOwners(); owners[orphanAttachment] {
		t.Errorf("the orphan CNI attachment %s still holds an IP", short(orphanAttachment))
	}

	e.stopAndRemove(t, cniPod, hostPod, victim)
	e.assertNoLeaks(t)
}

// orphanCNIAttachment makes what a crash between CNI ADD and persisting the
// record would leave: a podbay-named namespace attached to the env's network
// through libcni, with the result in the daemon's CNI cache. It returns the
// container ID.
func (e *env) orphanCNIAttachment(t *testing.T) string {
	t.Helper()
	id := randHex(32)
	e.noteIDs(id)
	if err := netns.Pin(e.netnsPath(id)); err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(e.cniConfig())
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{"/usr/lib/cni", binDir}, e.cacheDir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An egress limit, so that the attachment also holds an ifb device.
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: e.netnsPath(id), IfName: "eth0",
		CapabilityArgs: map[string]any{"bandwidth": map[string]uint64{"egressRate": 1e7, "egressBurst": 1e7}}}
	if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CNI ADD of the orphan attachment: %v", err)
	}
	if !e.ipamOwners()[id] {
		t.Fatalf("the orphan attachment holds no IP; the test cannot check its collection")
	}
	return id
}

// TestSIGTERMLeavesPodsRunning: a clean shutdown leaves pods running and the
// next daemon manages them.
func TestSIGTERMLeavesPodsRunning(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	id := e.runPod(t, e.podConfig("lasting", withPause()), "")
	st, info := e.status(t, id)
	ip := podIP(st)

	e.stop()
	if !pidAlive(info.Pid) {
		t.Fatalf("pause process %d died with the daemon's clean shutdown", info.Pid)
	}
	if !isMounted(t, e.netnsPath(id)) {
		t.Errorf("sandbox key unmounted by the daemon's clean shutdown")
	}
	requirePing(t, ip)

	e.start("")
	e.assertNoLeaksExcept(t, id)
	st2, info2 := e.status(t, id)
	if st2.State != runtimeapi.PodSandboxState_SANDBOX_READY || podIP(st2) != ip || info2.Pid != info.Pid {
		t.Errorf("after restart: state %v ip %q pid %d, want READY %q %d", st2.State, podIP(st2), info2.Pid, ip, info.Pid)
	}
	e.stopAndRemove(t, id)
	waitGone(t, info.Pid, 10*time.Second)
	e.assertNoLeaks(t)
}

// TestRestartKillsOrphanedPlugin: podbayd is killed while a CNI ADD hangs.
// The plugin runs in its own process group and outlives the daemon; the
// restarted daemon kills it before recovery runs the DEL that undoes the
// pod (a late ADD would otherwise leave what it made), the kubelet's retry
// of RunPodSandbox works, and nothing leaks.
func TestRestartKillsOrphanedPlugin(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	cfg := e.podConfig("orphan-plugin")

	e.hangCNI("ADD")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() {
		_, err := e.tryRunPod(ctx, cfg, "")
		runErr <- err
	}()
	pid := e.waitHungPlugin(t, "ADD")
	t.Cleanup(func() {
		if processRunning(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	e.kill9()
	if err := <-runErr; err == nil {
		t.Fatal("RunPodSandbox succeeded although the daemon was killed during its CNI ADD")
	}
	if !processRunning(pid) {
		t.Fatalf("the hung plugin %d died with the daemon; the test shows nothing", pid)
	}
	e.clearFailures()
	e.restart("")

	if processRunning(pid) {
		t.Errorf("the plugin %d a killed daemon left running is still there after the restart", pid)
	}
	if !strings.Contains(fileTail(e.logPath, 200), "killed a CNI plugin a previous podbayd left running") {
		t.Errorf("the restarted daemon logged no orphaned plugin it killed")
	}
	id := e.runPod(t, cfg, "")
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
	e.requireDelAfterFailedAdd(t)
	e.requireNoPluginProcesses(t)
}

// waitHungPlugin waits until a podbay-failcni call of verb hangs and
// returns the pid of the plugin process.
func (e *env) waitHungPlugin(t *testing.T, verb string) int {
	t.Helper()
	var pid int
	if err := eventually(rpcTimeout, func() error {
		hung := map[string]bool{}
		for _, c := range e.cniCalls() {
			if c.Verb == verb && c.Outcome == "hang" {
				hung[c.ContainerID] = true
			}
		}
		for _, p := range readProcs() {
			if filepath.Base(p.exe) != "podbay-failcni" || p.state == "Z" {
				continue
			}
			environ, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "environ"))
			env := map[string]string{}
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if k, v, ok := strings.Cut(string(kv), "="); ok {
					env[k] = v
				}
			}
			if env["CNI_COMMAND"] == verb && hung[env["CNI_CONTAINERID"]] &&
				filepath.Dir(env["CNI_NETNS"]) == e.netnsDir {
				pid = p.pid
				return nil
			}
		}
		return fmt.Errorf("no podbay-failcni hangs in %s", verb)
	}); err != nil {
		t.Fatal(err)
	}
	return pid
}
