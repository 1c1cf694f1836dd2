package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runFailpoints are RunPodSandbox's steps, in order. run.shm (the pod's
// /dev/shm mounted) is not a vm handler's step: see skipStepOnVM.
var runFailpoints = []string{"run.record", "run.shm", "run.netns", "run.cni", "run.create", "run.start", "run.ready"}

// skipStepOnVM skips a failpoint that a vm handler's pod never reaches: a
// VM has its own /dev/shm, so run.shm and stop.shm are oci handlers' only.
func skipStepOnVM(t *testing.T, fp string) {
	if suiteRuntimeType == "vm" && strings.HasSuffix(fp, ".shm") {
		t.Skipf("%s: a vm handler's pod has no pod shm", fp)
	}
}

// failureCase injects one failure into RunPodSandbox.
type failureCase struct {
	name       string
	failpoints string     // PODBAY_FAILPOINTS
	inject     func(*env) // tool-based failure, cleared before the retry
	// cniAddFailed: the failure was a CNI ADD that failed half way, so a
	// DEL must have been issued for that container.
	cniAddFailed bool
	// pause: the failure is in the runtime, which only a pod with a pause
	// process calls (a pod without one has its namespaces pinned).
	pause bool
}

func runFailureCases() []failureCase {
	var cases []failureCase
	for _, fp := range runFailpoints {
		cases = append(cases, failureCase{name: fp, failpoints: fp + "=1*error"})
	}
	return append(cases,
		failureCase{name: "cni-add", inject: func(e *env) { e.failCNI("ADD") }, cniAddFailed: true},
		failureCase{name: "runtime-create", inject: func(e *env) { e.failRuntime("create") }, pause: true},
		failureCase{name: "runtime-start", inject: func(e *env) { e.failRuntime("start") }, pause: true},
	)
}

// TestRunPodSandboxRollback fails RunPodSandbox at every step, in both
// network orders, and checks that the failure undid everything and that
// the same pod then runs.
func TestRunPodSandboxRollback(t *testing.T) {
	requireRoot(t)
	for _, order := range []string{"before", "after"} {
		for _, tc := range runFailureCases() {
			t.Run(order+"/"+tc.name, func(t *testing.T) {
				skipStepOnVM(t, tc.name)
				e := newEnv(t, envOptions{runcNetworkOrder: order})
				e.start(tc.failpoints)
				if tc.inject != nil {
					tc.inject(e)
				}
				cfg := e.podConfig("rollback")
				if tc.pause {
					cfg = e.podConfig("rollback", withPause())
				}

				_, err := e.tryRunPod(rpcCtx(t), cfg, "")
				if err == nil {
					t.Fatal("RunPodSandbox succeeded with a failing step")
				}
				if c := code(err); c == codes.Unavailable || c == codes.DeadlineExceeded || !e.running() {
					t.Fatalf("RunPodSandbox: %v; the daemon must survive and answer", err)
				}
				t.Logf("RunPodSandbox failed as injected: %v", err)
				if pods := e.listPods(t, nil); len(pods) != 0 {
					t.Errorf("a failed RunPodSandbox left pods in List: %v", podIDs(pods))
				}
				e.assertNoLeaks(t)
				if tc.cniAddFailed {
					e.requireDelAfterFailedAdd(t)
				}

				e.clearFailures()
				id := e.runPod(t, cfg, "")
				st, _ := e.status(t, id)
				if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
					t.Fatalf("retry: state %v, want READY", st.State)
				}
				e.requireIPInSubnet(t, podIP(st))
				if pods := e.listPods(t, nil); len(pods) != 1 {
					t.Errorf("after the retry List has %v, want only %s", podIDs(pods), short(id))
				}
				e.stopAndRemove(t, id)
				e.assertNoLeaks(t)
			})
		}
	}
}

// requireDelAfterFailedAdd checks the CNI trace: every container whose ADD
// failed got a DEL afterwards.
func (e *env) requireDelAfterFailedAdd(t *testing.T) {
	t.Helper()
	failed := map[string]bool{}
	for _, c := range e.cniCalls() {
		switch {
		case c.Verb == "ADD" && c.Outcome != "ok":
			failed[c.ContainerID] = true
		case c.Verb == "DEL" && c.Outcome == "ok":
			delete(failed, c.ContainerID)
		}
	}
	for id := range failed {
		t.Errorf("CNI ADD for %s failed half way and no DEL followed", short(id))
	}
}

// TestFailpointsNeedBuildTag: a podbayd built without the failpoints tag
// ignores PODBAY_FAILPOINTS. The pod runs although run.cni is set to fail
// and run.start to kill the daemon.
func TestFailpointsNeedBuildTag(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, envOptions{daemon: "podbayd-nofailpoints"})
	e.start("run.cni=error,run.start=kill")
	id := e.runPod(t, e.podConfig("untagged"), "")
	if !e.running() {
		t.Fatal("podbayd died: it armed run.start=kill")
	}
	e.stopPod(t, id)
	e.removePod(t, id)
}

// TestDaemonKilledDuringRun kills podbayd right after each step of
// RunPodSandbox; the restarted daemon must undo the half-made sandbox.
func TestDaemonKilledDuringRun(t *testing.T) {
	requireRoot(t)
	for _, fp := range runFailpoints {
		t.Run(fp, func(t *testing.T) {
			skipStepOnVM(t, fp)
			e := newEnv(t, envOptions{})
			e.start(fp + "=kill")
			cfg := e.podConfig("killed")

			_, err := e.tryRunPod(rpcCtx(t), cfg, "")
			if err == nil {
				t.Fatal("RunPodSandbox succeeded though the daemon was to die")
			}
			if code(err) != codes.Unavailable {
				t.Errorf("RunPodSandbox: %v, want Unavailable (daemon gone)", err)
			}
			e.waitExit(10 * time.Second)

			e.restart("")
			for _, p := range e.listPods(t, nil) {
				if p.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					t.Errorf("half-made sandbox %s listed as READY after restart", short(p.Id))
				} else {
					t.Errorf("half-made sandbox %s listed (%v) after restart; it should have been undone", short(p.Id), p.State)
				}
			}
			e.eventuallyNoLeaks(t, 20*time.Second)

			id := e.runPod(t, cfg, "")
			st, _ := e.status(t, id)
			if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("retry: state %v, want READY", st.State)
			}
			e.requireIPInSubnet(t, podIP(st))
			e.stopAndRemove(t, id)
			e.assertNoLeaks(t)
		})
	}
}

// TestDaemonKilledDuringStopRemove kills podbayd inside StopPodSandbox and
// RemovePodSandbox; after restart both complete and nothing leaks. An oci
// handler's Stop also deletes the dead pause container: killed after that
// delete and before it is recorded, the next Stop finds nothing of it and
// must not fail on that.
func TestDaemonKilledDuringStopRemove(t *testing.T) {
	requireRoot(t)
	points := []string{"stop.cni", "stop.unmount", "remove.netns"}
	if suiteRuntimeType != "vm" {
		points = append(points, "stop.release_pause", "stop.shm")
	}
	for _, fp := range points {
		t.Run(fp, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.start(fp + "=kill")
			id := e.runPod(t, e.podConfig("killed-"+fp), "")

			var err error
			if fp == "remove.netns" {
				e.stopPod(t, id)
				_, err = e.rt.RemovePodSandbox(rpcCtx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			} else {
				_, err = e.rt.StopPodSandbox(rpcCtx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			}
			if code(err) != codes.Unavailable {
				t.Errorf("RPC with %s=kill: %v, want Unavailable (daemon gone)", fp, err)
			}
			e.waitExit(10 * time.Second)

			e.restart("")
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			resp, err := e.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			switch {
			case fp == "remove.netns" && code(err) == codes.NotFound:
				// Recovery finished the remove; acceptable.
			case err != nil:
				t.Fatalf("status after restart: %v", err)
			case resp.Status.State == runtimeapi.PodSandboxState_SANDBOX_READY:
				t.Errorf("sandbox READY after a stop was interrupted by a crash")
			}
			e.stopPod(t, id)
			_, info := e.statusIfExists(t, id)
			if info != nil && !info.NetworkStopped {
				t.Errorf("networkStopped false after stop")
			}
			e.removePod(t, id)
			if pods := e.listPods(t, nil); len(pods) != 0 {
				t.Errorf("pods left: %v", podIDs(pods))
			}
			e.assertNoLeaks(t)
		})
	}
}

// statusIfExists is status for a sandbox that may be gone.
func (e *env) statusIfExists(t *testing.T, id string) (*runtimeapi.PodSandboxStatus, *sandboxInfo) {
	t.Helper()
	_, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if code(err) == codes.NotFound {
		return nil, nil
	}
	st, info := e.status(t, id)
	return st, &info
}

// TestStopRetriesFailedCNIDel: a CNI DEL that fails makes StopPodSandbox
// fail, so that the kubelet retries; the retry releases everything.
func TestStopRetriesFailedCNIDel(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	id := e.runPod(t, e.podConfig("stubborn"), "")

	e.failCNICount("DEL", 1)
	if _, err := e.rt.StopPodSandbox(rpcCtx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err == nil {
		t.Errorf("StopPodSandbox succeeded though CNI DEL failed; the IP and host rules would be lost for good")
	}
	e.stopPod(t, id)
	_, info := e.status(t, id)
	if !info.NetworkStopped {
		t.Errorf("networkStopped false after a successful stop")
	}
	if e.ipamOwners()[id] {
		t.Errorf("IP still reserved after the retried stop")
	}
	e.removePod(t, id)
	e.assertNoLeaks(t)
}

// TestRollbackWithFailingUndo: RunPodSandbox fails at CNI ADD and every
// CNI DEL of its rollback fails too. The half-made sandbox must not be lost:
// the daemon keeps what it needs to finish the teardown, the retry runs the
// pod, and after a restart (recovery finishes failed rollbacks) nothing of
// the failed attempt is left.
func TestRollbackWithFailingUndo(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	cfg := e.podConfig("unlucky")
	e.failCNI("ADD")
	e.failCNI("DEL")
	if _, err := e.tryRunPod(rpcCtx(t), cfg, ""); err == nil {
		t.Fatal("RunPodSandbox succeeded with a failing CNI ADD")
	}
	for _, p := range e.listPods(t, nil) {
		if p.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("failed sandbox %s listed READY", short(p.Id))
		}
	}
	e.clearFailures()
	for _, l := range e.findLeaks(nil) {
		t.Logf("held after the failed rollback, daemon running: %s", l)
	}

	id := e.runPod(t, cfg, "")
	e.stopAndRemove(t, id)

	e.restart("")
	e.eventuallyNoLeaks(t, 10*time.Second)
}
