package server

import (
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
)

// An oci handler's Stop deletes the dead pause container and its root
// filesystem and records it, so that Remove deletes neither again; a failed
// deletion fails the Stop, and the retried Stop finishes it. A vm handler's
// pause container stays until Remove.
func TestStopReleasesPauseContainer(t *testing.T) {
	e := newTestEnv(t, "")
	e.runtimes["vm"] = e.rt
	e.cfg.Runtimes["vm"] = config.Runtime{Path: "/bin/true", Type: config.TypeVM}
	e.srv.Shutdown(t.Context())
	e.srv = e.newServer(t, nil)

	id := e.mustRun(t, podConfig("released"))
	e.img.failOn("removerootfs", errors.New("device busy"))
	if err := e.stopPod(id); err == nil {
		t.Fatal("StopPodSandbox succeeded though the pause container's root filesystem could not be removed")
	}
	if e.persisted(t, id).PauseReleased {
		t.Error("pause container recorded released after a failed removal")
	}
	e.img.failOn("removerootfs", nil)
	if err := e.stopPod(id); err != nil {
		t.Fatalf("retried StopPodSandbox: %v", err)
	}
	if rec := e.persisted(t, id); !rec.PauseReleased {
		t.Errorf("after Stop: pause released %v, want true", rec.PauseReleased)
	}
	if n := e.img.count(); n != 0 {
		t.Errorf("after Stop: %d root filesystems left, want the pause container's removed", n)
	}
	deletes := e.rt.called("delete", id)
	if deletes == 0 {
		t.Error("after Stop: the pause container was not deleted")
	}
	if err := e.removePod(id); err != nil {
		t.Fatal(err)
	}
	if n := e.rt.called("delete", id); n != deletes {
		t.Errorf("Remove deleted the released pause container again (%d deletes, %d after Stop)", n, deletes)
	}

	resp, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: podConfig("vm"), RuntimeHandler: "vm"})
	if err != nil {
		t.Fatal(err)
	}
	vm := resp.PodSandboxId
	if err := e.stopPod(vm); err != nil {
		t.Fatal(err)
	}
	if rec := e.persisted(t, vm); rec.PauseReleased || e.rt.called("delete", vm) != 0 || e.img.count() != 1 {
		t.Errorf("vm handler after Stop: released %v, %d deletes, %d root filesystems; want its pause container kept for Remove",
			rec.PauseReleased, e.rt.called("delete", vm), e.img.count())
	}
	if err := e.removePod(vm); err != nil {
		t.Fatal(err)
	}
	if e.rt.called("delete", vm) == 0 || e.img.count() != 0 {
		t.Errorf("vm handler after Remove: %d deletes, %d root filesystems", e.rt.called("delete", vm), e.img.count())
	}
}
