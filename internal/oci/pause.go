package oci

import (
	"context"
	"fmt"

	"github.com/podbay/podbay/internal/runtime"
)

var _ runtime.Pauser = (*Runtime)(nil)

// Pause freezes every process of container id: `<runtime> pause id`.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	if _, err := r.runtimeCmd(ctx, "pause", id); err != nil {
		return fmt.Errorf("pause container %s: %w", id, err)
	}
	return nil
}

// Resume thaws the processes of container id that Pause froze:
// `<runtime> resume id`.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	if _, err := r.runtimeCmd(ctx, "resume", id); err != nil {
		return fmt.Errorf("resume container %s: %w", id, err)
	}
	return nil
}
