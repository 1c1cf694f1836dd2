package shim

import (
	"context"
	"errors"
	"fmt"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// Start starts the init process of a created container. An unknown ID
// gives an error wrapping errdefs.ErrNotFound; a container whose shim is
// gone errdefs.ErrFailedPrecondition.
func (r *Runtime) Start(ctx context.Context, id string) error {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	tasks, err := r.liveTasks(ctx, c)
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	if _, err := tasks.Start(cctx, &taskapi.StartRequest{ID: id}); err != nil {
		return fmt.Errorf("start container %s: %w", id, timedOut(ctx, cctx, r.cfg.CommandTimeout, rpcError(err)))
	}
	return nil
}

// liveTasks returns the task service of c's shim, or an error wrapping
// ErrFailedPrecondition when the shim is gone.
func (r *Runtime) liveTasks(ctx context.Context, c *container) (taskapi.TaskService, error) {
	tasks, err := c.pod.task(ctx)
	if errors.Is(err, errShimGone) {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return tasks, err
}

// State asks the shim about container id. MonitorPid is the shim's pid.
// A container whose shim is gone is reported stopped, with no monitor. An
// unknown ID gives an error wrapping errdefs.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return runtime.State{}, err
	}
	st := runtime.State{ID: id, Status: runtime.StatusStopped, Bundle: c.rec.Bundle, Created: c.rec.Created}
	if c.pod.isDead() {
		return st, nil
	}
	tasks, err := c.pod.task(ctx)
	if err != nil {
		if errors.Is(err, errShimGone) {
			return st, nil
		}
		return runtime.State{}, fmt.Errorf("state of container %s: %w", id, err)
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	resp, err := tasks.State(cctx, &taskapi.StateRequest{ID: id})
	if err != nil {
		err = rpcError(err)
		if errors.Is(err, errShimGone) {
			return st, nil
		}
		return runtime.State{}, fmt.Errorf("state of container %s: %w", id, err)
	}
	st.Status = taskStatus(resp.Status)
	if st.Status != runtime.StatusStopped {
		st.Pid = int(resp.Pid)
	}
	if resp.Bundle != "" {
		st.Bundle = resp.Bundle
	}
	st.MonitorPid = c.pod.shimPid()
	return st, nil
}

func taskStatus(s tasktypes.Status) runtime.Status {
	switch s {
	case tasktypes.Status_CREATED:
		return runtime.StatusCreated
	case tasktypes.Status_RUNNING:
		return runtime.StatusRunning
	case tasktypes.Status_STOPPED:
		return runtime.StatusStopped
	case tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
		return runtime.StatusPaused
	}
	return runtime.StatusUnknown
}

// TaskStats returns the statistics the shim reports for container id's
// cgroup (for Kata, the cgroup inside the VM). An unknown ID gives an
// error wrapping errdefs.ErrNotFound.
func (r *Runtime) TaskStats(ctx context.Context, id string) (*cgroups.Stats, error) {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	tasks, err := r.liveTasks(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("statistics of container %s: %w", id, err)
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	resp, err := tasks.Stats(cctx, &taskapi.StatsRequest{ID: id})
	if err != nil {
		return nil, fmt.Errorf("statistics of container %s: %w", id, rpcError(err))
	}
	return statsFromMetrics(resp.GetStats(), time.Now())
}
