package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// Faults beyond a kill: a CNI plugin, an OCI runtime or a registry that
// hangs instead of failing. Each must end at its configured timeout with a
// classified error, leave nothing behind, and not stop the same work from
// succeeding once the fault is gone.

// Short fault timeouts keep the tests quick; timeSlack is what a bounded
// call may take beyond its timeout (the undo after it, a loaded machine).
const (
	faultPluginTimeout  = 3 * time.Second
	faultRuntimeTimeout = 6 * time.Second
	faultPullTimeout    = 4 * time.Second
	timeSlack           = 25 * time.Second
)

// TestFaultCNIPluginHangs: a CNI ADD that hangs fails RunPodSandbox with
// DeadlineExceeded once plugin_timeout has passed, and the pod is undone
// (the plugin killed, its DEL run); a DEL that hangs fails StopPodSandbox
// the same way, and the kubelet's next Stop finishes the teardown.
func TestFaultCNIPluginHangs(t *testing.T) {
	e := newEnv(t, envOptions{pluginTimeout: faultPluginTimeout.String()})
	e.start("")
	cfg := e.podConfig("cni-hang")

	e.hangCNI("ADD")
	start := time.Now()
	_, err := e.tryRunPod(rpcCtx(t), cfg, "")
	took := time.Since(start)
	t.Logf("RunPodSandbox with a hanging ADD: %v after %v", err, took)
	requireTimeoutError(t, "RunPodSandbox with a hanging CNI ADD", err, codes.DeadlineExceeded, "plugin_timeout")
	requireBounded(t, "RunPodSandbox with a hanging CNI ADD", took, faultPluginTimeout)
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("the timed-out RunPodSandbox left pods in List: %v", podIDs(pods))
	}
	e.assertNoLeaks(t)
	e.requireDelAfterFailedAdd(t)
	e.requireNoPluginProcesses(t)

	e.clearFailures()
	id := e.runPod(t, cfg, "")
	st, _ := e.status(t, id)
	e.requireIPInSubnet(t, podIP(st))

	e.hangCNI("DEL")
	start = time.Now()
	_, err = e.rt.StopPodSandbox(rpcCtx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	took = time.Since(start)
	t.Logf("StopPodSandbox with a hanging DEL: %v after %v", err, took)
	requireTimeoutError(t, "StopPodSandbox with a hanging CNI DEL", err, codes.DeadlineExceeded, "plugin_timeout")
	requireBounded(t, "StopPodSandbox with a hanging CNI DEL", took, faultPluginTimeout)
	if _, info := e.status(t, id); info.NetworkStopped {
		t.Errorf("networkStopped after a DEL that timed out")
	}
	e.requireNoPluginProcesses(t)

	e.clearFailures()
	e.stopPod(t, id)
	if _, info := e.status(t, id); !info.NetworkStopped {
		t.Errorf("networkStopped false after the retried stop")
	}
	if e.ipamOwners()[id] {
		t.Errorf("IP still reserved after the retried stop")
	}
	e.removePod(t, id)
	e.assertNoLeaks(t)
}

// TestFaultRuntimeHangs: the runtime hangs in create or start, of the
// sandbox container or of a container. The call fails with
// DeadlineExceeded once the handler's timeout has passed, the hung
// processes are killed, nothing is left, and the same work then succeeds.
func TestFaultRuntimeHangs(t *testing.T) {
	e, images := newContainerEnvWith(t, envOptions{runtimeTimeout: faultRuntimeTimeout.String()}, "busybox")
	for _, verb := range []string{"create", "start"} {
		t.Run("sandbox-"+verb, func(t *testing.T) {
			cfg := e.podConfig("rt-hang-"+verb, withPause()) // the sandbox container's runtime hangs
			if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
				t.Fatal(err)
			}
			e.hangRuntime(verb)
			start := time.Now()
			_, err := e.tryRunPod(rpcCtx(t), cfg, "")
			took := time.Since(start)
			t.Logf("RunPodSandbox with a hanging runtime %s: %v after %v", verb, err, took)
			requireTimeoutError(t, "RunPodSandbox with a hanging runtime "+verb, err, codes.DeadlineExceeded, "timeout")
			requireBounded(t, "RunPodSandbox with a hanging runtime "+verb, took, faultRuntimeTimeout)
			e.requireHungRuntimeGone(t, verb)
			if pods := e.listPods(t, nil); len(pods) != 0 {
				t.Errorf("the timed-out RunPodSandbox left pods in List: %v", podIDs(pods))
			}
			e.assertNoLeaks(t)

			e.clearFailures()
			pod := testPod{id: e.runPod(t, cfg, ""), cfg: cfg}
			id, _ := e.runContainer(t, pod, containerConfig("after-hang", images.ref("busybox"), ctrCommand("sleep", "600")))
			e.stopContainer(t, id, 0)
			e.stopAndRemove(t, pod.id)
			e.assertNoLeaks(t)
		})
	}
	for _, verb := range []string{"create", "start"} {
		t.Run("container-"+verb, func(t *testing.T) {
			pod := e.runTestPod(t, "rt-hang-ctr-"+verb)
			cfg := containerConfig("hung", images.ref("busybox"), ctrCommand("sleep", "600"))
			e.hangRuntime(verb)
			start := time.Now()
			id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
			if err == nil && verb == "start" {
				_, err = e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id})
			}
			took := time.Since(start)
			t.Logf("container %s with a hanging runtime: %v after %v", verb, err, took)
			requireTimeoutError(t, "container "+verb+" with a hanging runtime", err, codes.DeadlineExceeded, "timeout")
			requireBounded(t, "container "+verb+" with a hanging runtime", took, faultRuntimeTimeout)
			e.requireHungRuntimeGone(t, verb)
			if id != "" {
				// A container whose start failed stays listed, as
				// containerd's: the kubelet removes it.
				e.removeContainer(t, id)
			}
			e.assertNoLeaksExcept(t, pod.id)

			e.clearFailures()
			if _, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.id}); err != nil {
				t.Fatalf("the pod after its container's runtime hung: %v", err)
			}
			id, _ = e.runContainer(t, pod, cfg)
			e.stopContainer(t, id, 0)
			e.stopAndRemove(t, pod.id)
			e.assertNoLeaks(t)
		})
	}
}

// TestFaultRegistryStallsMidBlob: a registry that sends half a blob and
// then nothing makes PullImage fail with Unavailable once
// pull_progress_timeout has passed without data; the download is
// abandoned (the registry sees the client go) and the image store is as
// before, with no partial blob in <graph root>/tmp. The same pull then
// succeeds.
func TestFaultRegistryStallsMidBlob(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr()), pullProgressTimeout: faultPullTimeout.String()})
	push(t, r, defaultSpec(t, "test", "busybox"))
	e.start("")
	e.waitPauseImage(t)
	before := e.storageState(t)
	ref := r.Reference("test/busybox:latest")

	r.SetFault(testimage.StallMidBlob)
	stalled := make(chan bool, 1)
	go func() {
		stalled <- eventually(faultPullTimeout, func() error {
			if r.Stats().Stalled == 0 {
				return errors.New("no blob GET held mid-blob")
			}
			return nil
		}) == nil
	}()
	start := time.Now()
	_, err := e.tryPull(rpcCtx(t), ref, nil)
	took := time.Since(start)
	if !<-stalled {
		t.Error("the pull never reached the middle of a blob; the stall was not exercised")
	}
	t.Logf("PullImage from a registry stalling mid-blob: %v after %v", err, took)
	requireTimeoutError(t, "PullImage from a stalling registry", err, codes.Unavailable, "pull_progress_timeout")
	requireBounded(t, "PullImage from a stalling registry", took, faultPullTimeout)
	if !strings.Contains(fmt.Sprint(err), ref) {
		t.Errorf("PullImage error %q does not name the reference", err)
	}
	if err := eventually(10*time.Second, func() error {
		if n := r.Stats().Stalled; n > 0 {
			return fmt.Errorf("%d blob GETs still held", n)
		}
		return nil
	}); err != nil {
		t.Errorf("the cancelled pull did not hang up: %v", err)
	}
	e.requireStorageBack(t, before, "a pull cancelled mid-blob")
	e.requireNoImage(t, ref)

	r.SetFault(testimage.NoFault)
	id := e.pullImage(t, ref, nil)
	e.requireImage(t, ref, id)
	e.assertNoLeaks(t)
}

// requireTimeoutError checks that err has code want and mentions what
// timed out.
func requireTimeoutError(t *testing.T, what string, err error, want codes.Code, mention string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded", what)
	}
	if code(err) != want {
		t.Errorf("%s: %v, want code %v", what, err, want)
	}
	if !strings.Contains(err.Error(), mention) {
		t.Errorf("%s: message %q does not mention %q", what, err, mention)
	}
}

// requireBounded checks that a call that timed out after timeout ended in
// bounded time, and not before the timeout.
func requireBounded(t *testing.T, what string, took, timeout time.Duration) {
	t.Helper()
	if took < timeout {
		t.Errorf("%s failed after %v, before its timeout %v: not the timeout", what, took, timeout)
	}
	if took > timeout+timeSlack {
		t.Errorf("%s took %v; the timeout is %v", what, took, timeout)
	}
}

// hangCNI makes podbay-failcni hang in verb until clearFailures.
func (e *env) hangCNI(verb string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.cniCtlDir, "hang-"+verb), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// hangRuntime makes the runtime wrapper hang in subcommand verb until
// clearFailures.
func (e *env) hangRuntime(verb string) {
	e.t.Helper()
	if err := os.WriteFile(e.runtimePath+".hang-"+verb, nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// requireHungRuntimeGone checks that the runtime wrapper hung in verb at
// least once and that every wrapper that hung has been killed.
func (e *env) requireHungRuntimeGone(t *testing.T, verb string) {
	t.Helper()
	f, err := os.Open(e.runtimePath + ".hangs")
	if err != nil {
		t.Fatalf("the runtime never hung: %v", err)
	}
	defer f.Close()
	seen := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		seen = seen || fields[0] == verb
		pid, _ := strconv.Atoi(fields[1])
		if err := eventually(5*time.Second, func() error {
			if processRunning(pid) {
				return fmt.Errorf("runtime %s (pid %d) that hung is still running", fields[0], pid)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	}
	if !seen {
		t.Errorf("the runtime never hung in %s: the fault was not exercised", verb)
	}
}

// requireNoPluginProcesses checks that no podbay-failcni runs for one of
// this env's sandboxes: a plugin that hung has been killed.
func (e *env) requireNoPluginProcesses(t *testing.T) {
	t.Helper()
	ids := e.knownIDs()
	if err := eventually(5*time.Second, func() error {
		for _, p := range readProcs() {
			if filepath.Base(p.exe) != "podbay-failcni" || p.state == "Z" {
				continue
			}
			environ, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "environ"))
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if id, ok := strings.CutPrefix(string(kv), "CNI_CONTAINERID="); ok && ids[id] {
					return fmt.Errorf("podbay-failcni pid %d for %s still running", p.pid, short(id))
				}
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// processRunning reports whether pid is a live process (not a zombie).
func processRunning(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
