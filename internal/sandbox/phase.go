package sandbox

import (
	"fmt"

	"github.com/podbay/podbay/internal/errdefs"
)

// Phase is where a sandbox is in its life. Phases only move forward, in the
// order declared; each move is a method on Record that refuses what the
// lifecycle does not allow, so the server never writes a phase by hand.
type Phase string

// Phases.
const (
	// PhaseCreating: the record is persisted and RunPodSandbox is at work.
	// The sandbox is never listed in it; recovery undoes it.
	PhaseCreating Phase = "creating"
	// PhaseReady: the pause container runs and the network is set up.
	PhaseReady Phase = "ready"
	// PhaseExited: the pause process died, or recovery found the pod dead.
	// Everything the pod holds is still held until Stop.
	PhaseExited Phase = "exited"
	// PhaseStopping: Stop has begun tearing the pod down; a restart finishes it.
	PhaseStopping Phase = "stopping"
	// PhaseStopped: Stop finished: containers and pause process stopped,
	// network released.
	PhaseStopped Phase = "stopped"
	// PhaseRemoving: Remove has begun. It first does whatever of Stop's
	// work is still owed (each step is idempotent), then deletes; a restart
	// finishes it.
	PhaseRemoving Phase = "removing"
)

var phaseOrder = map[Phase]int{
	PhaseCreating: 0, PhaseReady: 1, PhaseExited: 2,
	PhaseStopping: 3, PhaseStopped: 4, PhaseRemoving: 5,
}

// Known reports whether p is one of the declared phases.
func (p Phase) Known() bool {
	_, ok := phaseOrder[p]
	return ok
}

// State is the phase as the CRI sees it (and as records before phases
// stored it): creating, ready, or notready for every later phase.
func (p Phase) State() State {
	switch p {
	case PhaseCreating:
		return StateCreating
	case PhaseReady:
		return StateReady
	}
	return StateNotReady
}

// NetworkPhase is how far a CNI pod's network has come. The two orders
// (network before or after the pause container starts) set the network and
// the container up in either order, so each has its own progress rather
// than a place in Phase. A host-network pod stays NetworkNone.
type NetworkPhase string

// Network phases.
const (
	// NetworkNone: no CNI ADD was issued.
	NetworkNone NetworkPhase = ""
	// NetworkAttached is persisted just before CNI ADD: from then on the
	// pod may hold CNI resources and a CNI DEL is owed.
	NetworkAttached NetworkPhase = "attached"
	// NetworkReleased: Stop's CNI DEL succeeded and the namespace is
	// unmounted.
	NetworkReleased NetworkPhase = "released"
)

// StopBegun reports whether Stop (or Remove, which stops first) has begun.
func (r *Record) StopBegun() bool {
	return phaseOrder[r.Phase] >= phaseOrder[PhaseStopping]
}

// OwesNetworkTeardown reports whether a CNI DEL (and, once published, an
// unmount of the namespace) is still owed.
func (r *Record) OwesNetworkTeardown() bool {
	return r.Network == NetworkAttached
}

// ReportsIPs reports whether the pod's IPs are still its own: its network
// is attached and Stop has not begun releasing it.
func (r *Record) ReportsIPs() bool {
	return r.Network == NetworkAttached && !r.StopBegun()
}

// BeginNetworkSetup records, before CNI ADD, that a DEL is owed from now on.
func (r *Record) BeginNetworkSetup() error {
	if r.Phase != PhaseCreating || r.NetworkMode != ModeCNI || r.Network != NetworkNone {
		return r.refuse("set up the network")
	}
	r.Network = NetworkAttached
	return nil
}

// BeginContainerCreate records, before the runtime's create, that the
// runtime may hold state for the sandbox container from now on.
func (r *Record) BeginContainerCreate() error {
	if r.Phase != PhaseCreating || r.ContainerCreated {
		return r.refuse("create the sandbox container")
	}
	r.ContainerCreated = true
	return nil
}

// MarkReady ends RunPodSandbox: the container is created and, for a CNI
// pod, the network attached.
func (r *Record) MarkReady() error {
	wantNet := NetworkNone
	if r.NetworkMode == ModeCNI {
		wantNet = NetworkAttached
	}
	if r.Phase != PhaseCreating || !r.ContainerCreated || r.Network != wantNet {
		return r.refuse("mark ready")
	}
	r.Phase = PhaseReady
	return nil
}

// MarkExited records that a ready pod's pause process is gone.
func (r *Record) MarkExited() error {
	if r.Phase != PhaseReady {
		return r.refuse("mark exited")
	}
	r.Phase = PhaseExited
	return nil
}

// BeginStop is persisted before Stop tears anything down.
func (r *Record) BeginStop() error {
	if r.Phase != PhaseReady && r.Phase != PhaseExited {
		return r.refuse("begin stop")
	}
	r.Phase = PhaseStopping
	return nil
}

// ReleaseNetwork records that CNI DEL succeeded and the namespace is
// unmounted, during a Stop (or the Stop a Remove runs).
func (r *Record) ReleaseNetwork() error {
	if (r.Phase != PhaseStopping && r.Phase != PhaseRemoving) || r.Network != NetworkAttached {
		return r.refuse("release the network")
	}
	r.Network = NetworkReleased
	return nil
}

// ReleasePause records that the pause container's runtime state and root
// filesystem are deleted, during a Stop (or the Stop a Remove runs), once
// the pause process is dead.
func (r *Record) ReleasePause() error {
	if (r.Phase != PhaseStopping && r.Phase != PhaseRemoving) || !r.ContainerCreated || r.PauseReleased {
		return r.refuse("release the pause container")
	}
	r.PauseReleased = true
	return nil
}

// FinishStop ends a Stop whose network is released.
func (r *Record) FinishStop() error {
	if r.Phase != PhaseStopping || r.OwesNetworkTeardown() {
		return r.refuse("finish stop")
	}
	r.Phase = PhaseStopped
	return nil
}

// BeginRemove is persisted before Remove does anything. A published pod
// may be removed in any phase; a removal may begin again after a crash.
func (r *Record) BeginRemove() error {
	if r.Phase == PhaseCreating || !r.Phase.Known() {
		return r.refuse("begin removal")
	}
	r.Phase = PhaseRemoving
	return nil
}

func (r *Record) refuse(what string) error {
	return fmt.Errorf("sandbox %s: cannot %s in phase %q (network %q, container created %v): %w",
		r.ID, what, r.Phase, r.Network, r.ContainerCreated, errdefs.ErrFailedPrecondition)
}

// consistent reports a record whose phase and resources contradict each
// other; the transitions never make one.
func (r *Record) consistent() error {
	bad := func(why string) error { return fmt.Errorf("%s: %w", why, r.refuse("be")) }
	switch {
	case !r.Phase.Known():
		return bad("unknown phase")
	case r.PauseReleased && !r.StopBegun():
		return bad("pause container released before stop")
	case r.NetworkMode != ModeCNI && r.Network != NetworkNone:
		return bad("host network with CNI progress")
	case r.Phase == PhaseCreating:
		if r.Network == NetworkReleased {
			return bad("network released while creating")
		}
		return nil
	case !r.ContainerCreated:
		return bad("published without a container")
	case r.NetworkMode == ModeCNI && r.Network == NetworkNone:
		return bad("published without a network")
	case !r.StopBegun() && r.Network == NetworkReleased:
		return bad("network released before stop")
	case r.Phase == PhaseStopped && r.Network == NetworkAttached:
		return bad("stopped with the network attached")
	}
	return nil
}
