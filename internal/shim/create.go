package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

// The annotations the CRI server puts in every bundle's config.json
// (specgen), by which a container is routed to its pod's shim.
const (
	annotationContainerType = annotations.ContainerType
	annotationSandboxID     = annotations.SandboxID
	containerTypeSandbox    = annotations.ContainerTypeSandbox
)

// podOf returns the pod a container with the bundle annotations belongs
// to: its own when it is the sandbox (type "sandbox", or no sandbox-id).
func podOf(id string, annotations map[string]string) string {
	sandboxID := annotations[annotationSandboxID]
	if annotations[annotationContainerType] == containerTypeSandbox || sandboxID == "" {
		return id
	}
	return sandboxID
}

// Create creates the task for a container and returns the pid of its
// init process, which waits for Start.
//
// The sandbox container of a pod (see podOf) starts the pod's shim; any
// other container is created in its pod's shim, which must be running
// (errdefs.ErrFailedPrecondition otherwise). opts.BundleDir holds
// config.json, whose root.path is the mounted root filesystem; no mounts
// are handed to the shim. The container's stdio are FIFOs podbay makes;
// it copies stdout and stderr to opts.LogPath in the CRI format ("":
// discarded). opts.MonitorCgroup, when set, is the cgroup the pod's shim
// lives in (as conmon does), so that it survives a restart of a daemon
// whose service manager kills the daemon's cgroup: born there through
// opts.SpawnMonitor, or moved there once started.
//
// An ID that is known is rejected with ErrAlreadyExists. On failure
// nothing is left: the task, the shim it started, the FIFOs and the log
// file are removed. Create gives up when ctx ends or after
// Config.CreateTimeout.
//
// A sysctl of the spec that the kernel refused is the request's error: it
// gives a *runtime.SysctlError (errdefs.ErrInvalidArgument).
func (r *Runtime) Create(ctx context.Context, opts runtime.CreateOptions) (pid int, retErr error) {
	pid, err := r.create(ctx, opts)
	return pid, runtime.ClassifyCreate(err, opts.BundleDir)
}

// create is Create before its failure is classified.
func (r *Runtime) create(ctx context.Context, opts runtime.CreateOptions) (pid int, retErr error) {
	if err := opts.Validate(); err != nil {
		return 0, fmt.Errorf("create container %s: %w", opts.ID, err)
	}
	id := opts.ID
	podID, p, err := r.createIn(ctx, opts)
	if err != nil {
		return 0, err
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CreateTimeout)
	defer cancel()

	dir := r.containerDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("create container %s: remove stale state: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("create container %s: %w", id, err)
	}
	defer undo.OnError(ctx, &retErr, "remove container state", func(context.Context) error {
		errs := []error{os.RemoveAll(dir)}
		for _, name := range shimBundleFiles {
			errs = append(errs, removeIfExists(filepath.Join(opts.BundleDir, name)))
		}
		return errors.Join(errs...)
	})
	rec, err := writeContainerRecord(dir, podID, opts)
	if err != nil {
		return 0, err
	}

	fifos, cio, err := r.openContainerIO(dir, opts)
	if err != nil {
		return 0, err
	}
	defer undo.OnError(ctx, &retErr, "close container stdio", func(context.Context) error {
		cio.close()
		if opts.LogPath != "" {
			return removeIfExists(opts.LogPath)
		}
		return nil
	})

	if podID == id {
		if p, err = r.startShim(ctx, id, opts.BundleDir, opts); err != nil {
			return 0, fmt.Errorf("create container %s: %w", id, timedOut(parent, ctx, r.cfg.CreateTimeout, err))
		}
		defer undo.OnError(ctx, &retErr, "stop shim", func(ctx context.Context) error {
			return r.stopShim(ctx, p)
		})
	}

	tasks, err := p.task(ctx)
	if err != nil {
		return 0, fmt.Errorf("create container %s: %w", id, err)
	}
	// Registered before the call: a Create that timed out may have
	// created the task all the same, and one the shim cut short (its
	// connection lost, or the shim killed) may have left the runtime's
	// state, which the shim then no longer knows: its binary's delete
	// removes that, before the shim's files in the bundle are.
	defer undo.OnError(ctx, &retErr, "delete task", func(ctx context.Context) error {
		deleted, err := r.deleteTask(ctx, p, id)
		if deleted || (err != nil && !errors.Is(err, errShimGone)) {
			return err
		}
		_, err = r.deleteDeadTask(ctx, id, opts.BundleDir)
		return err
	})
	resp, err := tasks.Create(ctx, &taskapi.CreateTaskRequest{
		ID:       id,
		Bundle:   opts.BundleDir,
		Terminal: opts.Terminal,
		Stdin:    fifos.stdinPath,
		Stdout:   fifos.stdoutPath,
		Stderr:   fifos.stderrPath,
		Options:  r.cfg.Options,
	})
	if err != nil {
		return 0, fmt.Errorf("create container %s: %w", id, timedOut(parent, ctx, r.cfg.CreateTimeout, rpcError(err)))
	}

	c := newContainer(rec, dir, p, cio)
	cio.start(log.With(r.ctx, "id", id), &r.wg)
	r.mu.Lock()
	r.containers[id] = c
	if c.sandbox {
		r.pods[podID] = p
	}
	r.mu.Unlock()
	r.watchExit(c)
	log.G(ctx).Debug("container created", "id", id, "pod", podID, "pid", resp.Pid)
	return int(resp.Pid), nil
}

// createIn finds the pod a container of opts is created in: podID, its
// shim p (nil for a sandbox, whose create starts one), once a restore of
// the pod in the background is done. A container that exists, a sandbox
// whose pod has a shim, and a container whose pod has no running shim are
// refused.
func (r *Runtime) createIn(ctx context.Context, opts runtime.CreateOptions) (podID string, p *pod, _ error) {
	id := opts.ID
	spec, err := runtime.ReadSpec(opts.BundleDir)
	if err != nil {
		return "", nil, fmt.Errorf("create container %s: %w", id, err)
	}
	podID = podOf(id, spec.Annotations)

	r.mu.Lock()
	_, exists := r.containers[id]
	p = r.pods[podID]
	r.mu.Unlock()
	if p != nil {
		if err := r.awaitRestore(ctx, p); err != nil {
			return "", nil, fmt.Errorf("create container %s: %w", id, err)
		}
	}
	switch {
	case exists:
		return "", nil, fmt.Errorf("create container %s: %w", id, errdefs.ErrAlreadyExists)
	case podID == id && p != nil:
		return "", nil, fmt.Errorf("create container %s: pod %s has a shim: %w", id, podID, errdefs.ErrAlreadyExists)
	case podID != id && (p == nil || p.isDead()):
		return "", nil, fmt.Errorf("create container %s: pod %s has no running shim: %w", id, podID, errdefs.ErrFailedPrecondition)
	}
	return podID, p, nil
}

// writeContainerRecord writes the record of the container of opts, in
// pod podID, into its state dir.
func writeContainerRecord(dir, podID string, opts runtime.CreateOptions) (containerRecord, error) {
	rec := containerRecord{
		Version:   recordVersion,
		ID:        opts.ID,
		Pod:       podID,
		Bundle:    opts.BundleDir,
		LogPath:   opts.LogPath,
		Terminal:  opts.Terminal,
		Stdin:     opts.Stdin,
		StdinOnce: opts.StdinOnce,
		Created:   time.Now(),
	}
	if err := writeRecord(filepath.Join(dir, containerFile), rec); err != nil {
		return containerRecord{}, fmt.Errorf("create container %s: %w", opts.ID, err)
	}
	return rec, nil
}

// openContainerIO opens the stdio FIFOs in the container's state dir and
// its log, and returns them with the I/O copier between them.
func (r *Runtime) openContainerIO(dir string, opts runtime.CreateOptions) (*stdio, *containerIO, error) {
	fifos, err := openStdio(dir, opts.Stdin, opts.Terminal, true)
	if err != nil {
		return nil, nil, fmt.Errorf("create container %s: stdio: %w", opts.ID, err)
	}
	logFile, err := openLogFile(opts.LogPath)
	if err != nil {
		fifos.close()
		return nil, nil, fmt.Errorf("create container %s: %w", opts.ID, err)
	}
	return fifos, newContainerIO(log.With(r.ctx, "id", opts.ID), fifos, logFile), nil
}

// deleteTask kills and deletes task id in p's shim. deleted is false when
// the shim does not know the task (not an error): it was deleted already,
// or never created, or its create was cut short, which may have left the
// runtime's state behind (see deleteDeadTask).
func (r *Runtime) deleteTask(ctx context.Context, p *pod, id string) (deleted bool, err error) {
	tasks, err := p.task(ctx)
	if err != nil {
		return false, err
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	_, err = tasks.Kill(cctx, &taskapi.KillRequest{ID: id, Signal: uint32(syscall.SIGKILL), All: true})
	if err = rpcError(err); err != nil && !errdefs.IsNotFound(err) {
		return false, fmt.Errorf("kill task: %w", err)
	}
	// The shim refuses to delete a task until its process has exited.
	deadline := time.Now().Add(killWait)
	for {
		_, err = tasks.Delete(cctx, &taskapi.DeleteRequest{ID: id})
		err = rpcError(err)
		switch {
		case err == nil:
			return true, nil
		case errdefs.IsNotFound(err):
			return false, nil
		case !errors.Is(err, errdefs.ErrFailedPrecondition) || time.Now().After(deadline):
			return false, fmt.Errorf("delete task: %w", err)
		}
		select {
		case <-cctx.Done():
			return false, fmt.Errorf("delete task: %w", cctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
