package server

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
)

// orphanContainer makes what a pod record set aside at start-up (or lost
// to a crash) leaves: a running container, its pod's namespace in use by
// the pod's sandbox container, and no pod record. Without handler, the
// container's record predates RuntimeHandler. The server is shut down;
// it returns the pod's and the container's IDs.
func (e *testEnv) orphanContainer(t *testing.T, handler bool) (pod, id string) {
	t.Helper()
	pod = e.podWithImage(t, "web")
	id = e.mustCreate(t, pod, containerConfig("c"))
	e.startFakeContainer(t, id)
	e.srv.Shutdown(context.Background())

	e.podInUse(pod)

	var rec container.Record
	if _, err := e.db.Get(containerBucket, id, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.RuntimeHandler != "runc" {
		t.Fatalf("container record's handler %q, want the pod's (runc)", rec.RuntimeHandler)
	}
	if !handler {
		rec.RuntimeHandler = ""
		if err := e.db.Put(containerBucket, id, container.RecordVersion, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.Delete(sandboxBucket, pod); err != nil {
		t.Fatal(err)
	}
	return pod, id
}

// podInUse makes pod's namespace in use until the runtime deletes the
// pod's sandbox container, as the sandbox process keeps it. The server
// must not be running.
func (e *testEnv) podInUse(pod string) {
	key := e.netnsPath(pod)
	e.ns.mu.Lock()
	e.ns.inUse[key] = true
	e.ns.mu.Unlock()
	e.rt.onDelete = func(deleted string) {
		if deleted == pod {
			e.ns.mu.Lock()
			delete(e.ns.inUse, key)
			e.ns.mu.Unlock()
		}
	}
}

// A container whose pod record is missing at start-up is removed by
// recovery, through the handler its record names or, for an older record
// that names none, through every handler; the pod's sandbox container,
// namespace, CNI attachment, root filesystem and directory are released
// by garbage collection.
func TestRecoverRemovesContainerOfMissingPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler bool
	}{
		{"record names its handler", true},
		{"record predates handlers", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			other := newFakeRuntime()
			e.runtimes["other"] = other
			pod, id := e.orphanContainer(t, tc.handler)

			e.srv = e.newServer(t, nil)
			if n := e.rt.called("delete", id); n != 1 {
				t.Errorf("runtime Delete of the container called %d times, want 1: %v", n, e.rt.calls)
			}
			if n := e.rt.called("stop", id); n != 1 {
				t.Errorf("runtime Stop of the running container called %d times, want 1", n)
			}
			if n := other.called("delete", id); tc.handler && n != 0 {
				t.Errorf("another handler's runtime was asked to delete the container")
			}
			if n := e.rt.called("delete", pod); n != 1 {
				t.Errorf("the pod's sandbox container deleted %d times, want 1", n)
			}
			e.assertNoContainers(t)
			e.assertNothingHeld(t)
		})
	}
}

// While recovery cannot remove a container of a missing pod, the container
// is listed, and the kubelet's StopContainer and RemoveContainer succeed
// once the cause is gone, rather than failing for ever.
func TestRemoveContainerOfMissingPod(t *testing.T) {
	for _, handler := range []bool{true, false} {
		e := newTestEnv(t, "")
		_, id := e.orphanContainer(t, handler)
		e.img.failOn("removerootfs", errors.New("device busy"))
		e.srv = e.newServer(t, nil)
		list, err := call(e.srv, "ListContainers", e.srv.ListContainers, &runtimeapi.ListContainersRequest{})
		if err != nil || len(list.Containers) != 1 || list.Containers[0].Id != id {
			t.Fatalf("handler %v: ListContainers = %v, %v; want the container whose removal failed", handler, list, err)
		}
		if list.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("handler %v: container whose removal failed is %v, want EXITED", handler, list.Containers[0].State)
		}
		e.img.failOn("removerootfs", nil)
		if err := e.stopContainer(id); err != nil {
			t.Errorf("handler %v: StopContainer: %v", handler, err)
		}
		if err := e.removeContainer(id); err != nil {
			t.Fatalf("handler %v: RemoveContainer: %v", handler, err)
		}
		if n := e.rt.called("delete", id); n < 1 {
			t.Errorf("handler %v: runtime container never deleted", handler)
		}
		e.img.mu.Lock()
		_, held := e.img.rootfses[id]
		e.img.mu.Unlock()
		if held {
			t.Errorf("handler %v: container's root filesystem left", handler)
		}
		// What the pod left (its root filesystem) is collected at the
		// next start.
		e.srv.Shutdown(context.Background())
		e.srv = e.newServer(t, nil)
		e.assertNoContainers(t)
		e.assertNothingHeld(t)
	}
}

// A container no runtime knows any more (a reboot), whose pod's record and
// handler are both unknown, is stopped as exited and removed.
func TestRecoverContainerNoRuntimeKnows(t *testing.T) {
	e := newTestEnv(t, "")
	_, id := e.orphanContainer(t, false)
	e.rt.mu.Lock()
	delete(e.rt.containers, id)
	e.rt.mu.Unlock()
	e.srv = e.newServer(t, nil)
	e.assertNoContainers(t)
	e.assertNothingHeld(t)
}

// A pod record missing at start-up while its sandbox container, network
// namespace and CNI attachment exist, with no container left or with a
// container whose record is missing too: garbage collection deletes the
// runtime containers, so that the namespace is no longer in use, and
// releases everything.
func TestRecoverCollectsPodWithoutRecord(t *testing.T) {
	t.Run("no container", func(t *testing.T) {
		e := newTestEnv(t, "")
		pod := e.mustRun(t, podConfig("lost"))
		e.srv.Shutdown(context.Background())
		e.podInUse(pod)
		if err := e.db.Delete(sandboxBucket, pod); err != nil {
			t.Fatal(err)
		}
		e.srv = e.newServer(t, nil)
		if n := e.rt.called("delete", pod); n != 1 {
			t.Errorf("sandbox container deleted %d times, want 1", n)
		}
		e.assertNothingHeld(t)
	})
	t.Run("container without record", func(t *testing.T) {
		e := newTestEnv(t, "")
		pod, id := e.orphanContainer(t, true)
		if err := e.db.Delete(containerBucket, id); err != nil {
			t.Fatal(err)
		}
		e.srv = e.newServer(t, nil)
		if n := e.rt.called("delete", pod); n != 1 {
			t.Errorf("sandbox container deleted %d times, want 1", n)
		}
		if n := e.rt.called("delete", id); n != 1 {
			t.Errorf("container deleted %d times, want 1", n)
		}
		e.assertNoContainers(t)
		e.assertNothingHeld(t)
	})
}

// A StartContainer cut short by a crash: before the runtime started the
// container, the retry starts it; after, recovery finds it running, and
// the retry is refused with FailedPrecondition, never run again. Stop and
// Remove then work.
func TestStartContainerRetriedAfterCrash(t *testing.T) {
	for _, tc := range []struct {
		point     string
		wantRetry codes.Code
	}{
		{"container.starting", codes.OK},
		{"container.start", codes.FailedPrecondition},
	} {
		t.Run(tc.point, func(t *testing.T) {
			e := newTestEnv(t, tc.point+"=error")
			pod := e.podWithImage(t, "web")
			id := e.mustCreate(t, pod, containerConfig("c"))
			if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil {
				t.Fatal("StartContainer succeeded with a failing step")
			}
			// The crash: what the failpoint left is what a kill there
			// leaves on disk.
			e.srv.Shutdown(context.Background())
			e.srv = e.newServer(t, nil)

			_, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id})
			wantStatus(t, "retried StartContainer", err, tc.wantRetry)
			if n := e.rt.called("start", id); tc.wantRetry != codes.OK && n != 1 {
				t.Errorf("runtime Start called %d times, want once", n)
			}
			if st := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
				t.Errorf("after the retry: %v, want RUNNING with a start time", st)
			}
			// The exit watcher runs.
			e.rt.exit(id)
			e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED)
			_, err = call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id})
			wantStatus(t, "StartContainer of an exited container", err, codes.FailedPrecondition)
			if err := e.stopContainer(id); err != nil {
				t.Fatal(err)
			}
			if err := e.removeContainer(id); err != nil {
				t.Fatal(err)
			}
			e.assertNoContainers(t)
		})
	}
}

// A container that was started, and exited, before its start was
// recorded cannot run again: recovery records it exited.
func TestRecoverCreatedContainerExited(t *testing.T) {
	e := newTestEnv(t, "container.start=error")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil {
		t.Fatal("StartContainer succeeded with a failing step")
	}
	e.srv.Shutdown(context.Background())
	e.rt.exit(id)
	e.srv = e.newServer(t, nil)
	if st := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("after restart: %v, want EXITED", st.State)
	}
	_, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id})
	wantStatus(t, "StartContainer", err, codes.FailedPrecondition)
}
