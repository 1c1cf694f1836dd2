package server

import (
	"context"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/sandbox"
)

// persisted reads the record of sandbox id from the database.
func (e *testEnv) persisted(t *testing.T, id string) sandbox.Record {
	t.Helper()
	var rec sandbox.Record
	if _, err := e.db.Get(sandboxBucket, id, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// wantPhase checks the persisted phases of sandbox id.
func (e *testEnv) wantPhase(t *testing.T, id string, phase sandbox.Phase, net sandbox.NetworkPhase) {
	t.Helper()
	if rec := e.persisted(t, id); rec.Phase != phase || rec.Network != net || !rec.ContainerCreated {
		t.Errorf("persisted phase %q network %q container %v, want %q %q true", rec.Phase, rec.Network, rec.ContainerCreated, phase, net)
	}
}

// The server moves a pod through its phases and persists each: ready, exited
// when the pause process dies, stopped, then gone.
func TestSandboxPhasesPersisted(t *testing.T) {
	e := newTestEnv(t, "")
	id, err := e.run(t, podConfig("phases"))
	if err != nil {
		t.Fatal(err)
	}
	e.wantPhase(t, id, sandbox.PhaseReady, sandbox.NetworkAttached)

	// The pause process dies.
	if err := e.rt.Stop(context.Background(), id, 0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.persisted(t, id).Phase != sandbox.PhaseExited && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	e.wantPhase(t, id, sandbox.PhaseExited, sandbox.NetworkAttached)
	st, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.Network.Ip == "" {
		t.Errorf("exited pod: %v ip %q, want NOTREADY with its IP", st.Status.State, st.Status.Network.Ip)
	}

	for i := range 2 {
		if _, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("stop #%d: %v", i, err)
		}
		e.wantPhase(t, id, sandbox.PhaseStopped, sandbox.NetworkReleased)
	}
	st, err = call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.Network.Ip != "" {
		t.Errorf("stopped pod: %v ip %q, want NOTREADY without IP", st.Status.State, st.Status.Network.Ip)
	}
	if _, err := call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	e.assertNothingHeld(t)
}

// A restart finishes a Stop or a Remove that a crash interrupted, from the
// phase persisted when it began.
func TestRecoverFinishesStopAndRemove(t *testing.T) {
	for _, tc := range []struct {
		name string
		step func(*sandbox.Record) error
		want sandbox.Phase // "" for removed
	}{
		{"stop", (*sandbox.Record).BeginStop, sandbox.PhaseStopped},
		{"remove", (*sandbox.Record).BeginRemove, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			id, err := e.run(t, podConfig("crashed"))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := sandbox.New(e.persisted(t, id)).Transition(tc.step)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.db.Put(sandboxBucket, id, sandbox.RecordVersion, rec); err != nil {
				t.Fatal(err)
			}
			e.srv.Shutdown(context.Background())

			e.srv = e.newServer(t, nil)
			if tc.want == "" {
				e.assertNothingHeld(t)
				return
			}
			e.wantPhase(t, id, tc.want, sandbox.NetworkReleased)
			if n := e.net.holding(); n != 0 {
				t.Errorf("%d CNI attachments held after the stop finished", n)
			}
		})
	}
}
