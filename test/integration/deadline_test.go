package integration

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRunPodSandboxDeadlineRetry: the kubelet gives up on a slow
// RunPodSandbox and retries; the retry gets the sandbox the first request
// made, not a "name reserved" error and not a second sandbox.
func TestRunPodSandboxDeadlineRetry(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("run.start=1*sleep(3s)")
	cfg := e.podConfig("slow")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := e.tryRunPod(ctx, cfg, "")
	cancel()
	if code(err) != codes.DeadlineExceeded {
		t.Fatalf("RunPodSandbox with a 1s deadline: %v, want DeadlineExceeded", err)
	}

	// The retry comes while the first attempt is still at work.
	id, err := e.tryRunPod(rpcCtx(t), cfg, "")
	if err != nil {
		t.Errorf("retry while the first attempt runs: %v", err)
		// Diagnose: does a later retry get the parked sandbox?
		if perr := eventually(10*time.Second, func() error {
			var err error
			id, err = e.tryRunPod(rpcCtx(t), cfg, "")
			return err
		}); perr != nil {
			t.Fatalf("later retries fail too: %v", perr)
		}
		t.Logf("a later retry returned %s", short(id))
	}
	st, _ := e.status(t, id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("state %v, want READY", st.State)
	}
	e.requireIPInSubnet(t, podIP(st))
	pods := e.listPods(t, nil)
	if len(pods) != 1 || pods[0].Id != id {
		t.Errorf("List %v, want exactly %s", podIDs(pods), short(id))
	}

	// A third request for the same pod now is a duplicate, which the
	// kubelet never sends: it must not create a second sandbox either way.
	if id3, err := e.tryRunPod(rpcCtx(t), cfg, ""); err == nil && id3 != id {
		t.Errorf("a third RunPodSandbox made another sandbox %s", short(id3))
	}
	if pods := e.listPods(t, nil); len(pods) != 1 {
		t.Errorf("List %v, want exactly one sandbox", podIDs(pods))
	}
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}
