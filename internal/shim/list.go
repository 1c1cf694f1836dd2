package shim

import (
	"context"

	"github.com/podbay/podbay/internal/runtime"
)

// ListContainers returns the sandboxes and containers the handler holds
// (as restored from its state directory at start, or created since), each
// with its bundle.
func (r *Runtime) ListContainers(context.Context) ([]runtime.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.State, 0, len(r.containers))
	for id, c := range r.containers {
		out = append(out, runtime.State{ID: id, Bundle: c.rec.Bundle})
	}
	return out, nil
}
