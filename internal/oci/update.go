package oci

import (
	"context"
	"fmt"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// Update changes the cgroup limits of container id (`runtime update
// --resources -`) and records them in the bundle's config.json, so that
// whoever reads the bundle later (a restarted daemon) sees the new values.
//
// Fields left nil in res keep their current value, in the cgroup as in
// config.json (runc's rule for update); device rules are not changed. An
// unknown ID gives an error wrapping errdefs.ErrNotFound, a stopped
// container errdefs.ErrFailedPrecondition. When the runtime refuses the
// values (a memory limit below the current usage), config.json is not
// changed.
func (r *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	bundle, data, err := runtime.ResourcesUpdate(ctx, r, id, res)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	if _, err := r.runtimeCmdInput(ctx, data, "update", "--resources", "-", id); err != nil {
		if r.isNotExist(err, id) {
			return fmt.Errorf("update container %s: %w", id, errdefs.ErrNotFound)
		}
		if st, stErr := r.State(ctx, id); stErr == nil && st.Status == runtime.StatusStopped {
			return fmt.Errorf("update container %s: container is stopped: %w", id, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("update container %s: %w", id, err)
	}
	// After the cgroup: a value the runtime refused must not be recorded.
	// A failure here leaves the cgroup updated and config.json behind; the
	// caller's retry makes them agree, an update being idempotent.
	if err := runtime.UpdateSpecResources(filepath.Join(bundle, "config.json"), data); err != nil {
		return fmt.Errorf("update container %s: record resources in config.json: %w", id, err)
	}
	log.G(ctx).Debug("container resources updated", "id", id)
	return nil
}
