package oci

import (
	"context"
	"fmt"

	"github.com/podbay/podbay/internal/runtime"
)

// WaitMonitor waits for the conmon of container id, which has exited (or
// was never started), to exit by itself, and kills it after a grace
// period. It reads only files (the attach symlink and conmon's pid file)
// and /proc: no runtime command runs. An ID without a running conmon is
// not an error.
func (r *Runtime) WaitMonitor(ctx context.Context, id string) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	if err := awaitMonitor(ctx, r.bundleOf(id), id); err != nil {
		return fmt.Errorf("wait for the monitor of container %s: %w", id, err)
	}
	return nil
}
