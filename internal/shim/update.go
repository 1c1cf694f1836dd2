package shim

import (
	"context"
	"fmt"
	"path/filepath"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// Update changes the resources of container id through the shim and
// records them in the bundle's config.json (as runtime.Runtime.Update does),
// so that whoever reads the bundle later sees the new values. Fields left
// nil keep their value. An unknown ID gives an error wrapping
// errdefs.ErrNotFound, a stopped container errdefs.ErrFailedPrecondition;
// when the shim refuses the values, config.json is not changed.
func (r *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	return r.update(ctx, id, res, nil)
}

var _ runtime.SandboxUpdater = (*Runtime)(nil)

// UpdateSandbox is Update for a pod's sandbox container, with the pod's
// resource totals as annotations (runtime.SandboxUpdater): the shim gets
// them in the task update's annotations, as containerd passes them to
// Kata, and config.json records them.
func (r *Runtime) UpdateSandbox(ctx context.Context, id string, res *specs.LinuxResources, annotations map[string]string) error {
	return r.update(ctx, id, res, annotations)
}

func (r *Runtime) update(ctx context.Context, id string, res *specs.LinuxResources, annotations map[string]string) error {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return fmt.Errorf("update container: %w", err)
	}
	bundle, data, err := runtime.ResourcesUpdate(ctx, r, id, res)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	tasks, err := r.liveTasks(ctx, c)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	if _, err := tasks.Update(cctx, &taskapi.UpdateTaskRequest{ID: id, Resources: &anypb.Any{TypeUrl: resourcesURL, Value: data}, Annotations: annotations}); err != nil {
		err = rpcError(err)
		if _, exited := c.exitStatus(); exited {
			return fmt.Errorf("update container %s: container is stopped: %w: %w", id, err, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("update container %s: %w", id, err)
	}
	// After the shim: a value it refused must not be recorded. A
	// failure here leaves the two apart until the caller's retry.
	if err := runtime.UpdateSpecResources(filepath.Join(bundle, "config.json"), data); err != nil {
		return fmt.Errorf("update container %s: record resources in config.json: %w", id, err)
	}
	if err := runtime.UpdateSpecAnnotations(filepath.Join(bundle, "config.json"), annotations); err != nil {
		return fmt.Errorf("update container %s: record annotations in config.json: %w", id, err)
	}
	log.G(ctx).Debug("container resources updated", "id", id)
	return nil
}

// ReopenLog closes container id's log file and opens its path anew, for
// CRI ReopenContainerLog after the kubelet renamed the file away. A
// container without a log file has nothing to reopen.
//
// An unknown ID gives an error wrapping errdefs.ErrNotFound. A stopped
// container gives errdefs.ErrFailedPrecondition and no new file is
// created, as the CRI asks; so does a log directory that is gone. Any
// failure to open the new file is an error, and the old file is kept.
func (r *Runtime) ReopenLog(ctx context.Context, id string) error {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return fmt.Errorf("reopen log of container: %w", err)
	}
	if _, exited := c.exitStatus(); exited || c.io == nil || c.pod.isDead() {
		return fmt.Errorf("reopen log of container %s: container is stopped: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err := c.io.log.reopen(); err != nil {
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	log.G(ctx).Debug("container log reopened", "id", id, "path", c.rec.LogPath)
	return nil
}
