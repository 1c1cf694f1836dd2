package shim

import (
	"context"
	"fmt"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

// Exited returns the container's exit status once it has exited and its
// output has been copied. ok is false while it runs, and for an unknown or
// deleted ID. The status is kept on disk: exits that happened while the
// daemon was down are found here after New, which it waits for when the
// container's pod is still being taken over (see awaitRestore).
func (r *Runtime) Exited(id string) (runtime.ExitStatus, bool, error) {
	if err := runtime.ValidateID(id); err != nil {
		return runtime.ExitStatus{}, false, err
	}
	r.mu.Lock()
	c := r.containers[id]
	r.mu.Unlock()
	if c != nil && r.awaitRestore(r.ctx, c.pod) == nil {
		if st, ok := c.exitStatus(); ok {
			return st, true, nil
		}
	}
	return readExit(r.containerDir(id))
}

// Wait blocks until container id has exited (see Exited) and returns its
// exit status, or until ctx ends or the Runtime is closed. When the
// container's shim dies, its containers are reported exited with
// 128+SIGKILL. An unknown ID gives an error wrapping errdefs.ErrNotFound.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return runtime.ExitStatus{}, fmt.Errorf("wait for container: %w", err)
	}
	select {
	case <-c.exited:
		return c.exit, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
	case <-r.ctx.Done():
		return runtime.ExitStatus{}, fmt.Errorf("wait for container %s: %w", id, errClosed)
	}
}

// watchExit waits for the container's task to exit and records the
// exit. When the shim dies, the task is deleted with the shim binary and
// reported exited with 128+SIGKILL, as containerd does. It returns
// without recording anything when the Runtime is closed.
func (r *Runtime) watchExit(c *container) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(c.watching)
		ctx := log.With(r.ctx, "id", c.id)
		for {
			st, err := r.waitTask(ctx, c)
			switch {
			case err == nil:
				if st.Code == oomExitCode {
					awaitExitEvent(c)
				}
				r.recordExit(ctx, c, st)
				// The pod's last task to exit gives its shim back.
				rctx, cancel := context.WithTimeout(ctx, undo.Timeout)
				r.releaseIfDone(rctx, c.pod)
				cancel()
				return
			case ctx.Err() != nil:
				return
			case c.pod.isDead():
				r.recordExit(ctx, c, r.deleteDeadShimTask(ctx, c))
				return
			case errdefs.IsNotFound(err):
				// The shim does not know the task: it was deleted behind
				// podbay's back. Its status is lost.
				log.G(ctx).Warn("shim lost the container's task", "err", err)
				r.recordExit(ctx, c, runtime.ExitStatus{Code: 255, ExitedAt: time.Now()})
				return
			}
			// The connection broke but the shim may live: the shim's
			// monitor tells within a moment; then retry.
			log.G(ctx).Debug("wait for container", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-c.pod.dead:
			case <-time.After(time.Second):
			}
		}
	}()
}

// oomExitCode is the status of a process the kernel's OOM killer
// killed (128+SIGKILL).
const oomExitCode = 137

// exitEventWait bounds the wait for a TaskExit event.
const exitEventWait = 500 * time.Millisecond

// awaitExitEvent waits (bounded) for the shim's TaskExit event of c. The
// shim publishes a TaskOOM before it, which marks the container
// OOM-killed: the OOM kill is then on record before the exit is reported,
// whatever order Wait's answer and the events arrive in.
func awaitExitEvent(c *container) {
	t := time.NewTimer(exitEventWait)
	defer t.Stop()
	select {
	case <-c.exitEvent:
	case <-t.C:
	}
}

// waitTask calls the shim's Wait for the task, without a time limit.
func (r *Runtime) waitTask(ctx context.Context, c *container) (runtime.ExitStatus, error) {
	tasks, err := c.pod.task(ctx)
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	resp, err := tasks.Wait(ctx, &taskapi.WaitRequest{ID: c.id})
	if err != nil {
		return runtime.ExitStatus{}, rpcError(err)
	}
	return runtime.ExitStatus{Code: int32(resp.ExitStatus), ExitedAt: exitTime(resp.ExitedAt.AsTime())}, nil
}

// exitTime is t, or now when the shim sent none.
func exitTime(t time.Time) time.Time {
	if t.IsZero() || t.Unix() <= 0 {
		return time.Now()
	}
	return t
}

// recordExit waits (bounded) for the container's output to be copied,
// then records st and wakes the waiters.
func (r *Runtime) recordExit(ctx context.Context, c *container, st runtime.ExitStatus) {
	if c.io != nil {
		c.io.finish(drainTimeout)
	}
	st = c.withOOM(st)
	if err := writeExit(c.dir, st); err != nil {
		log.G(ctx).Error("record container exit", "err", err)
	}
	c.setExit(st)
	log.G(ctx).Debug("container exited", "code", st.Code)
}

// deleteDeadShimTask deletes the task of c after its shim died, or when
// its live shim does not know it, once, and returns its exit status. As containerd's cleanupAfterDeadShim, this
// is best effort: a failure is logged and the exit status is then 255
// (the task may never have been created, when the daemon stopped during
// Create).
func (r *Runtime) deleteDeadShimTask(ctx context.Context, c *container) runtime.ExitStatus {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	if c.deadExit != nil {
		return *c.deadExit
	}
	st, err := r.deleteDeadTask(ctx, c.id, c.rec.Bundle)
	if err != nil {
		log.G(ctx).Warn("clean up after dead shim", "id", c.id, "err", err)
		st = runtime.ExitStatus{Code: 255, ExitedAt: time.Now()}
	}
	c.deadExit = &st
	return st
}
