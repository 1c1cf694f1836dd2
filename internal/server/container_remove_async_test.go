package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
)

// RemoveContainer answers before the container's resources are released:
// the container is unpublished at once and its Removing record persisted;
// RemovePodSandbox waits for the release; a release that cannot finish is
// retried, and a restart finishes it from the record.
func TestRemoveContainerAsync(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("app"))
	e.startFakeContainer(t, id)
	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	// Stopped first: the pod's Stop removes the pause container's root
	// filesystem, which the failure below would hit.
	if err := e.stopPod(pod); err != nil {
		t.Fatal(err)
	}

	e.img.failOn("removerootfs", errors.New("device busy"))
	if _, err := call(e.srv, "RemoveContainer", e.srv.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	list, err := call(e.srv, "ListContainers", e.srv.ListContainers, &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 0 {
		t.Errorf("ListContainers after RemoveContainer = %v, %v; want none", list, err)
	}
	_, err = call(e.srv, "ContainerStatus", e.srv.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	wantStatus(t, "ContainerStatus after RemoveContainer", err, codes.NotFound)
	var rec container.Record
	if _, err := e.db.Get(containerBucket, id, &rec); err != nil || !rec.Removing {
		t.Errorf("record while the release is pending: removing %v, err %v; want a Removing record", rec.Removing, err)
	}

	// The pod cannot go while its container's release is pending.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = e.srv.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "not finished") || !strings.Contains(err.Error(), "device busy") {
		t.Errorf("RemovePodSandbox while a container's release fails: %v; want it to wait and say why", err)
	}

	// A restart finishes the release from the record.
	e.srv.Shutdown(context.Background())
	e.img.failOn("removerootfs", nil)
	e.srv = e.newServer(t, nil)
	if e.rt.called("delete", id) < 1 {
		t.Errorf("runtime container never deleted")
	}
	e.assertNoContainers(t)

	// Without a failure, RemovePodSandbox right after RemoveContainer
	// finds everything released.
	pod = e.podWithImage(t, "web2")
	id = e.mustCreate(t, pod, containerConfig("app2"))
	if _, err := call(e.srv, "RemoveContainer", e.srv.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if err := e.removePod(pod); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	e.assertNoContainers(t)
	if n := e.img.count(); n != 0 {
		t.Errorf("%d root filesystems left", n)
	}
}
