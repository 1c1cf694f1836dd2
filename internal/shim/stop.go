package shim

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Stop stops container id: it sends sig (SIGTERM if 0) to the init
// process, waits up to timeout for it to exit, then sends SIGKILL to all
// the container's processes and waits again. A timeout of 0 kills at once.
//
// Stop is idempotent: a stopped container and an unknown ID are not
// errors. When it returns nil the exit has been recorded (Exited reports
// it), and when that was the pod's last running task, the pod's shim has
// been released (releaseIfDone).
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration, sig syscall.Signal) (retErr error) {
	c, err := r.lookup(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if _, ok := c.exitStatus(); ok {
		r.releaseIfDone(ctx, c.pod)
		return nil
	}
	// A stopped pod's shim is given back as soon as its last task exits.
	defer func() {
		if retErr == nil {
			r.releaseIfDone(ctx, c.pod)
		}
	}()
	if timeout > 0 {
		if err := r.kill(ctx, c, sig, false); err != nil {
			return fmt.Errorf("stop container %s: %w", id, err)
		}
		if r.waitExit(ctx, c, timeout) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stop container %s: %w", id, err)
		}
		log.G(ctx).Info("container ignored stop signal, killing it", "id", id, "signal", sig, "timeout", timeout)
	}
	if err := r.kill(ctx, c, syscall.SIGKILL, true); err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	if !r.waitExit(ctx, c, killWait+drainTimeout) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stop container %s: %w", id, err)
		}
		if r.ctx.Err() != nil {
			return fmt.Errorf("stop container %s: %w", id, errClosed)
		}
		return fmt.Errorf("stop container %s: still running %v after SIGKILL", id, killWait)
	}
	return nil
}

// kill sends sig to the container's init process, or to all its
// processes. A process that has exited, or a shim that is gone (its
// containers are reported exited), is not an error.
func (r *Runtime) kill(ctx context.Context, c *container, sig syscall.Signal, all bool) error {
	tasks, err := c.pod.task(ctx)
	if errors.Is(err, errShimGone) {
		return nil
	}
	if err != nil {
		return err
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	_, err = tasks.Kill(cctx, &taskapi.KillRequest{ID: c.id, Signal: uint32(sig), All: all})
	err = rpcError(err)
	if err == nil || errdefs.IsNotFound(err) || errors.Is(err, errShimGone) {
		return nil
	}
	if _, ok := c.exitStatus(); ok {
		return nil
	}
	return fmt.Errorf("signal %d: %w", sig, err)
}
