package oci

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/runtime"
)

// killWait bounds the wait for a container to die after SIGKILL; longer
// means it is stuck in the kernel (uninterruptible sleep), and the caller
// should retry rather than hang.
const killWait = 10 * time.Second

// Stop stops container id: it sends sig (SIGTERM if 0) to the init
// process, waits up to timeout for it to exit, then sends SIGKILL to all
// the container's processes and waits again. A timeout of 0 kills at once.
//
// Stop is idempotent: a stopped container and an unknown ID are not
// errors. When it returns nil and the container has a running conmon, the
// exit file has been written (Exited reports it), unless ctx ended first.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration, sig syscall.Signal) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if proc, monitor, exited, ok := r.openInit(id); ok {
		if exited {
			r.awaitExitFile(ctx, id, monitor)
			return nil
		}
		defer proc.Close()
		return r.stopProcess(ctx, id, proc, monitor, timeout, sig)
	}
	st, err := r.State(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	if st.Status == runtime.StatusStopped || st.Pid <= 0 {
		r.awaitExitFile(ctx, id, st.MonitorPid)
		return nil
	}

	proc, err := procfs.OpenProcess(st.Pid)
	if errors.Is(err, unix.ESRCH) {
		r.awaitExitFile(ctx, id, st.MonitorPid)
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	defer proc.Close()
	// The pid may have been recycled between the state call and
	// pidfd_open: the handle is good only if the runtime still reports it.
	if again, err := r.State(ctx, id); errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	} else if again.Status == runtime.StatusStopped || again.Pid != st.Pid {
		r.awaitExitFile(ctx, id, st.MonitorPid)
		return nil
	}
	return r.stopProcess(ctx, id, proc, st.MonitorPid, timeout, sig)
}

// stopProcess is Stop once proc is known to be the container's init and
// monitor its conmon (0: none).
func (r *Runtime) stopProcess(ctx context.Context, id string, proc *procfs.Process, monitor int, timeout time.Duration, sig syscall.Signal) error {
	exited := func() bool {
		if proc.Exited() {
			return true
		}
		_, ok, _ := r.Exited(id)
		return ok
	}
	if timeout > 0 {
		// proc is the init (checked by the caller) and the runtime's
		// kill of the init alone is a kill(2) of it: through the pidfd,
		// without a fork and exec, and with no pid reuse race.
		if err := proc.Signal(sig); err != nil {
			return fmt.Errorf("stop container %s: signal %d: %w", id, sig, err)
		}
		if r.waitFor(ctx, id, timeout, exited) {
			r.awaitExitFile(ctx, id, monitor)
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stop container %s: %w", id, err)
		}
		log.G(ctx).Info("container ignored stop signal, killing it", "id", id, "signal", sig, "timeout", timeout)
	}
	if err := r.killAll(ctx, id, proc); err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	if !r.waitFor(ctx, id, killWait, exited) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stop container %s: %w", id, err)
		}
		return fmt.Errorf("stop container %s: still running %v after SIGKILL", id, killWait)
	}
	r.awaitExitFile(ctx, id, monitor)
	return nil
}

// killAll sends SIGKILL to every process of the container whose init is
// proc. An init that is pid 1 of its own pid namespace (the container did
// not share the host's or the pod's) takes every process of that namespace
// with it when it dies, which is what the runtime's `kill --all` would
// reach: it is killed through its pidfd, without a fork and exec of the
// runtime. Otherwise the runtime kills the processes of the container's
// cgroup.
func (r *Runtime) killAll(ctx context.Context, id string, proc *procfs.Process) error {
	if proc.InitOfPidNamespace() && proc.Signal(syscall.SIGKILL) == nil {
		return nil
	}
	if err := r.Kill(ctx, id, syscall.SIGKILL, true); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// awaitExitFile gives the conmon at monitor (0: none) time to write the
// exit file of a container that has exited, so that Exited answers as soon
// as Stop returns.
func (r *Runtime) awaitExitFile(ctx context.Context, id string, monitor int) {
	if monitor <= 0 {
		return
	}
	r.waitFor(ctx, id, monitorExitGrace, func() bool {
		if _, ok, _ := r.Exited(id); ok {
			return true
		}
		return !isMonitorOf(monitor, id)
	})
}

// waitFor waits until cond holds, for at most d or until ctx ends, and
// returns cond's last value. It re-checks when the exit file of id may
// have changed and every 50 ms.
func (r *Runtime) waitFor(ctx context.Context, id string, d time.Duration, cond func() bool) bool {
	ch, cancel := r.exits.subscribe(id)
	defer cancel()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-deadline.C:
			return cond()
		case <-ch:
		case <-tick.C:
		}
	}
}
