package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Delete removes container id: it kills what still runs, deletes the
// task in the shim (or, when the shim is dead, runs the shim binary's
// delete for it, as containerd does), and removes its FIFOs, exit status
// and the shim's files in the bundle. The bundle directory and the log
// file stay.
//
// Deleting the sandbox container deletes the pod's other containers that
// are left, then shuts the shim down (killing it when it does not exit),
// removes its socket and the pod's state.
//
// Deleting an unknown ID removes any state left for it and returns nil:
// the CRI server deletes in rollbacks where Create may not have happened.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	c, err := r.lookup(ctx, id)
	if errdefs.IsNotFound(err) {
		if err := os.RemoveAll(r.containerDir(id)); err != nil {
			return fmt.Errorf("delete container %s: %w", id, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if c.sandbox {
		err = r.deletePod(ctx, c)
	} else {
		err = r.deleteContainer(ctx, c)
	}
	if err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	log.G(ctx).Debug("container deleted", "id", id)
	return nil
}

// deletePod deletes the sandbox container sb and with it the pod.
func (r *Runtime) deletePod(ctx context.Context, sb *container) error {
	p := sb.pod
	// Delete does all a release would; one under way finishes first.
	p.releaseMu.Lock()
	p.released = true
	p.releaseMu.Unlock()
	r.mu.Lock()
	var others []*container
	for _, c := range r.containers {
		if c.pod == p && c != sb {
			others = append(others, c)
		}
	}
	r.mu.Unlock()
	for _, c := range others {
		log.G(ctx).Info("deleting container left in a deleted pod", "id", c.id, "pod", p.id)
		if err := r.deleteContainer(ctx, c); err != nil {
			return fmt.Errorf("delete container %s of the pod: %w", c.id, err)
		}
	}
	if err := r.removeTask(ctx, sb); err != nil {
		return err
	}
	// The sandbox's state stays until the shim is gone, so that a retry
	// finds the pod.
	if err := r.stopShim(ctx, p); err != nil {
		return fmt.Errorf("stop shim: %w", err)
	}
	return r.forget(sb)
}

// deleteContainer deletes one container and forgets it.
func (r *Runtime) deleteContainer(ctx context.Context, c *container) error {
	if err := r.removeTask(ctx, c); err != nil {
		return err
	}
	return r.forget(c)
}

// removeTask kills c's task if it runs, waits for its exit to be
// recorded and deletes the task.
func (r *Runtime) removeTask(ctx context.Context, c *container) error {
	if !c.pod.isDead() {
		if _, ok := c.exitStatus(); !ok {
			if err := r.kill(ctx, c, syscall.SIGKILL, true); err != nil {
				return err
			}
		}
	}
	// The exit watcher records the exit; for a dead shim it also deletes
	// the task with the shim binary.
	if !r.waitExit(ctx, c, killWait+drainTimeout) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.ctx.Err() != nil {
			return errClosed
		}
		return fmt.Errorf("still running %v after SIGKILL", killWait)
	}
	if !c.pod.isDead() {
		deleted, err := r.deleteTask(ctx, c.pod, c.id)
		switch {
		case deleted:
			return nil
		case err == nil:
			// The shim does not know the task: its create may have been
			// cut short (the daemon killed during Create, the shim
			// cancelling it with the connection), leaving the runtime's
			// state and cgroup, which the shim binary's delete removes.
			log.G(ctx).Debug("shim does not know the task; cleaning up what its create may have left", "id", c.id)
		case !errors.Is(err, errShimGone) || !c.pod.isDead():
			return err
		}
	}
	// Done by the exit watcher already, unless the shim died since.
	r.deleteDeadShimTask(ctx, c)
	return nil
}

// forget closes what is left of c's stdio and removes its state and the
// shim's files in its bundle.
func (r *Runtime) forget(c *container) error {
	<-c.watching
	c.io.close()
	var errs []error
	for _, name := range shimBundleFiles {
		if err := removeIfExists(filepath.Join(c.rec.Bundle, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	r.mu.Lock()
	delete(r.containers, c.id)
	if c.sandbox && r.pods[c.pod.id] == c.pod {
		delete(r.pods, c.pod.id)
	}
	r.mu.Unlock()
	return errors.Join(errs...)
}
