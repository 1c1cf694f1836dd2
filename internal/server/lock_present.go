package server

import (
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/sandbox"
)

// presentIndex is what withPresent asks of an index: sandbox.Index and
// container.Index.
type presentIndex[T any] interface {
	Get(idOrPrefix string) (T, error)
	Has(id string) bool
}

// withPresent is the prologue of the handlers the CRI makes idempotent
// (StopPodSandbox, RemovePodSandbox, StopContainer, RemoveContainer): it
// looks id (or a unique prefix) up in idx, takes lock, and runs fn with
// it held if the object is still published, since a Remove may have
// taken it while the caller waited. An object unknown, or removed
// meanwhile, is not an error: fn does not run and withPresent returns
// nil.
func withPresent[T any](idx presentIndex[T], id string, lock func(T) (fullID string, unlock func()), fn func(T) error) error {
	obj, err := idx.Get(id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
	fullID, unlock := lock(obj)
	defer unlock()
	if !idx.Has(fullID) {
		return nil // removed while we waited
	}
	return fn(obj)
}

// lockContainerOp takes c.OpMu, for withPresent.
func lockContainerOp(c *container.Container) (string, func()) {
	c.OpMu.Lock()
	return c.ID, c.OpMu.Unlock
}

// lockSandboxStop takes sb.StopMu (no container is created in the pod
// meanwhile) and sb.OpMu, for withPresent.
func lockSandboxStop(sb *sandbox.Sandbox) (string, func()) {
	sb.StopMu.Lock()
	sb.OpMu.Lock()
	return sb.ID, func() {
		sb.OpMu.Unlock()
		sb.StopMu.Unlock()
	}
}
