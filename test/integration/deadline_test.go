package integration

import (
	"context"
	"fmt"
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

// TestCreateContainerDeadlineRetry: the kubelet gives up on a slow
// CreateContainer (a VM runtime hot-plugging a container can be slow) and
// retries; the retry gets the container the first request made, whether
// that one is still at work or already done, not a "name is reserved"
// error and not a second container.
func TestCreateContainerDeadlineRetry(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "slowctr")
	e.restart("container.create=2*sleep(3s)")
	cfg := containerConfig("slow", images.ref("busybox"), ctrCommand("sleep", "1000"))

	giveUp := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := e.tryCreateContainer(ctx, pod, cfg); code(err) != codes.DeadlineExceeded {
			t.Fatalf("CreateContainer with a 1s deadline: %v, want DeadlineExceeded", err)
		}
	}
	onlyContainer := func(id string) {
		t.Helper()
		if got := e.listContainers(t, nil); len(got) != 1 || got[0].Id != id {
			t.Errorf("containers %v, want exactly %s", containerIDs(got), short(id))
		}
	}

	// The retry comes while the first attempt is still at work.
	giveUp()
	id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
	if err != nil {
		t.Fatalf("retry while the first attempt runs: %v", err)
	}
	onlyContainer(id)
	// A duplicate now, which the kubelet never sends, makes nothing.
	if id2, err := e.tryCreateContainer(rpcCtx(t), pod, cfg); err == nil || code(err) != codes.AlreadyExists {
		t.Errorf("a third CreateContainer: %s, %v; want AlreadyExists", short(id2), err)
	}
	onlyContainer(id)
	e.startContainer(t, id)
	e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
	e.stopContainer(t, id, 0)
	e.removeContainer(t, id)

	// The retry comes after the first attempt finished: it was parked.
	giveUp()
	var parked string
	if err := eventually(10*time.Second, func() error {
		got := e.listContainers(t, nil)
		if len(got) != 1 {
			return fmt.Errorf("containers %v", containerIDs(got))
		}
		parked = got[0].Id
		return nil
	}); err != nil {
		t.Fatalf("the abandoned attempt made no container: %v", err)
	}
	if id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg); err != nil || id != parked {
		t.Errorf("retry after the first attempt finished: %s, %v; want the parked %s", short(id), err, short(parked))
	}
	onlyContainer(parked)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
