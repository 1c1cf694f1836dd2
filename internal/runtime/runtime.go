// Package runtime is the contract between the CRI server and a runtime
// handler, and what its implementations share. internal/oci (conmon and
// an OCI runtime binary) and internal/shim (a containerd shim v2 over
// ttrpc) implement Runtime; they import this package and not each other.
//
// Besides the interface and its option and result types, the package holds
// the helpers both implementations use: ID and option checks, the process
// spec of an exec, the bundle's config.json, the environment given to a
// monitor process and terminal resizes. The pidfd process handle both use
// is internal/procfs's Process.
package runtime

import (
	"context"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Runtime is one runtime handler as the server uses it. Calls for the same
// container ID must be serialized by the caller.
type Runtime interface {
	// Create creates container opts.ID from its bundle and returns the
	// pid of its init process, which waits for Start. An ID that is known
	// gives errdefs.ErrAlreadyExists; a failed Create leaves nothing.
	Create(ctx context.Context, opts CreateOptions) (int, error)
	// Start starts the user process of a created container.
	Start(ctx context.Context, id string) error
	// Stop sends sig, waits up to timeout for the container to exit,
	// then kills it.
	Stop(ctx context.Context, id string, timeout time.Duration, sig syscall.Signal) error
	// Delete removes the container; an unknown ID is not an error.
	Delete(ctx context.Context, id string) error
	// State reports the container; an unknown ID gives errdefs.ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// Exited returns the exit status once the container has exited; ok
	// is false before. Exits that happened while the daemon was down are
	// found here.
	Exited(id string) (status ExitStatus, ok bool, err error)
	// Wait blocks until the container has exited, or ctx ends.
	Wait(ctx context.Context, id string) (ExitStatus, error)
	// ExecSync runs a process in the running container and waits for it.
	ExecSync(ctx context.Context, id string, opts ExecOptions) (ExecResult, error)
	// Exec runs an interactive process and returns its exit status.
	Exec(ctx context.Context, id string, opts ExecStreamOptions) (int32, error)
	// Attach connects streams to the container's stdio.
	Attach(ctx context.Context, id string, opts AttachOptions) error
	// Update changes the container's cgroup limits and records them in
	// the bundle's config.json.
	Update(ctx context.Context, id string, r *specs.LinuxResources) error
	// ReopenLog makes the container's log writer reopen its log file.
	ReopenLog(ctx context.Context, id string) error
	// ListContainers lists every container the runtime holds, running or
	// not, each with its ID and bundle (other fields may be unset). The
	// daemon's start-up garbage collection uses it to find the containers
	// no record owns.
	ListContainers(ctx context.Context) ([]State, error)
	// Close releases what this handler instance holds (the shims'
	// connections); its containers keep running.
	Close() error
}
