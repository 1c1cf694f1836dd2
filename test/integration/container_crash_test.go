package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/store"
)

// TestDaemonKilledDuringStartContainer kills podbayd at each point of
// StartContainer, restarts it, and retries StartContainer as the kubelet
// does. Killed before the runtime started the container, the retry starts
// it; killed after, the container runs and the retry says so with
// FailedPrecondition. Never Unknown; and Stop and Remove then work with
// nothing left.
func TestDaemonKilledDuringStartContainer(t *testing.T) {
	for _, tc := range []struct {
		point string
		retry codes.Code
	}{
		{"container.starting", codes.OK},
		{"container.start", codes.FailedPrecondition},
	} {
		t.Run(tc.point, func(t *testing.T) {
			e, images := newContainerEnv(t, "busybox")
			pod := e.runTestPod(t, "start-killed")
			id := e.createContainer(t, pod, containerConfig("c", images.ref("busybox"), ctrCommand("sleep", "1000")))

			e.restart(tc.point + "=kill")
			_, err := e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id})
			if code(err) != codes.Unavailable {
				t.Errorf("StartContainer with %s=kill: %v, want Unavailable (daemon gone)", tc.point, err)
			}
			e.waitExit(10 * time.Second)

			e.restart("")
			_, err = e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id})
			if code(err) != tc.retry {
				t.Errorf("retried StartContainer: %v (%v), want %v", code(err), err, tc.retry)
			}
			st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
			if st.StartedAt == 0 {
				t.Errorf("running container without a start time: %v", st)
			}
			if got := e.execOutput(t, id, "echo", "alive"); got != "alive\n" {
				t.Errorf("ExecSync after the retry: %q", got)
			}

			e.stopContainer(t, id, 0)
			if st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout); st.ExitCode != 137 {
				t.Errorf("stopped with timeout 0: exit code %d, want 137", st.ExitCode)
			}
			_, err = e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id})
			if code(err) != codes.FailedPrecondition {
				t.Errorf("StartContainer of an exited container: %v, want FailedPrecondition", err)
			}
			e.removeContainer(t, id)
			e.requireNoMonitor(t, id)
			e.assertNoLeaksExcept(t, pod.id)
			e.stopAndRemove(t, pod.id)
			e.assertNoLeaks(t)
		})
	}
}

// TestPodRecordLostAtRestart: a pod whose record cannot be read at
// start-up (it is set aside) is not left running. The restarted daemon
// removes its containers, running or created, and releases the pod's
// sandbox container, namespace, CNI attachment, root filesystem and
// directory.
func TestPodRecordLostAtRestart(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "lost-record")
	running, _ := e.runContainer(t, pod, containerConfig("running", ref, ctrCommand("sleep", "1000")))
	created := e.createContainer(t, pod, containerConfig("created", ref, ctrCommand("sleep", "1000")))

	e.kill9()
	db, err := store.Open(filepath.Join(e.rootDir, "podbay.db"))
	if err != nil {
		t.Fatal(err)
	}
	// A version no daemon reads: recovery quarantines the record.
	err = db.Put("sandboxes", pod.id, 1<<20, map[string]string{"id": pod.id})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	e.restart("")
	if err := eventually(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		resp, err := e.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return err
		}
		if len(resp.Containers) != 0 {
			return fmt.Errorf("containers of the lost pod still listed: %v", containerIDs(resp.Containers))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, created} {
		// The kubelet's removal of what it still knows succeeds.
		e.stopContainer(t, id, 0)
		e.removeContainer(t, id)
		e.requireNoMonitor(t, id)
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("pods listed: %v", podIDs(pods))
	}
	e.eventuallyNoLeaks(t, 30*time.Second)
	e.assertNoLeaks(t)
}
