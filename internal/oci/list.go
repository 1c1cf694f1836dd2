package oci

import (
	"context"

	"github.com/podbay/podbay/internal/runtime"
)

// ListContainers returns every container the runtime knows under its
// root, running or not, with the bundle each was created from.
func (r *Runtime) ListContainers(ctx context.Context) ([]runtime.State, error) {
	return r.List(ctx)
}
