package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// ErrMonitorNotSpawned is CreateOptions.SpawnMonitor's answer when it
// cannot start monitors in their cgroup: it started nothing.
var ErrMonitorNotSpawned = errors.New("monitor not spawned in its cgroup")

// CreateOptions describes one container to create.
type CreateOptions struct {
	// ID is the container ID: letters, digits and "_+-.".
	ID string
	// BundleDir is the absolute path of the OCI bundle, holding
	// config.json. The runtime's monitor runs there and writes its files
	// into it.
	BundleDir string
	// LogPath is the CRI-format log file the container's stdout and
	// stderr are written to; its directory must exist. "" discards them.
	// A failed Create removes the file.
	LogPath string
	// Terminal allocates a pseudo-terminal; it must agree with
	// process.terminal in config.json.
	Terminal bool
	// Stdin keeps a pipe to the container's stdin for attach.
	Stdin bool
	// StdinOnce closes the container's stdin when the first attach client
	// disconnects.
	StdinOnce bool
	// MonitorCgroup, if set, is the cgroupfs path (relative to each
	// hierarchy's root, e.g. "/podbay/conmon") that the runtime's
	// per-container monitor process — conmon, or the pod's shim — is
	// placed in, so that it survives a restart of a daemon whose service
	// manager kills the daemon's cgroup. The directories are created if
	// missing and never removed. "" leaves the monitor in the daemon's
	// cgroups.
	MonitorCgroup string
	// SpawnMonitor, if set, starts the monitor process (as exec.Cmd's
	// Start) already in MonitorCgroup (cgroups.Spawner), so that the
	// runtime need not move it there, or returns ErrMonitorNotSpawned
	// without starting it (the runtime then starts and moves it);
	// PlaceMonitor, if also set, wins.
	SpawnMonitor func(*exec.Cmd) error
	// PlaceMonitor, if set, places the monitor process instead of
	// MonitorCgroup: under the systemd driver it starts the monitor's own
	// transient scope (podbay-conmon-<id>.scope, podbay-shim-<pod>.scope).
	PlaceMonitor func(ctx context.Context, pid int) error
}

// StartMonitor starts the monitor process cmd: born in MonitorCgroup
// through SpawnMonitor where it can (spawned), else with cmd.Start, and
// the caller then places it (PlaceMonitor) or moves it (MonitorCgroup).
func (o CreateOptions) StartMonitor(cmd *exec.Cmd) (spawned bool, err error) {
	if o.SpawnMonitor != nil && o.PlaceMonitor == nil {
		err := o.SpawnMonitor(cmd)
		if !errors.Is(err, ErrMonitorNotSpawned) {
			return err == nil, err
		}
	}
	return false, cmd.Start()
}

// Validate checks the ID and that the bundle and log paths are absolute.
// Errors wrap errdefs.ErrInvalidArgument.
func (o CreateOptions) Validate() error {
	if err := ValidateID(o.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(o.BundleDir) {
		return fmt.Errorf("bundle %q is not an absolute path: %w", o.BundleDir, errdefs.ErrInvalidArgument)
	}
	if o.LogPath != "" && !filepath.IsAbs(o.LogPath) {
		return fmt.Errorf("log path %q is not an absolute path: %w", o.LogPath, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Status is a container's state as the runtime reports it.
type Status string

// Statuses from the OCI runtime spec ("creating" and anything else a
// runtime may report map to StatusUnknown).
const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusStopped Status = "stopped"
	StatusPaused  Status = "paused"
	StatusUnknown Status = "unknown"
)

// State is what the runtime reports about a container, plus its monitor.
type State struct {
	ID     string
	Status Status
	// Pid is the init process's pid; 0 once stopped.
	Pid int
	// Bundle is the bundle directory the container was created from.
	Bundle string
	// Created is when the runtime created the container.
	Created time.Time
	// MonitorPid is the pid of the container's monitor (conmon, or the
	// pod's shim), 0 if it is not running. A container that is not
	// stopped but has no monitor will get no exit status: Wait would not
	// return.
	MonitorPid int
}

// ExitStatus is how a container's init process ended.
type ExitStatus struct {
	// Code is the exit status, or 128+signal when a signal ended the
	// process (137 after SIGKILL).
	Code int32
	// ExitedAt is when the process exited, as the monitor recorded it.
	ExitedAt time.Time
	// OOMKilled is set when the kernel's OOM killer killed a process of
	// the container, as the monitor saw it.
	OOMKilled bool
}

// MaxExecOutput caps ExecResult.Stdout and Stderr together; the rest is
// read and discarded, and the result says that it was truncated. The
// kubelet's CRI client takes messages of at most 16 MiB, so an
// ExecSyncResponse must fit in that, with its framing and a "command timed
// out" note: stdout and stderr of 16 MiB each (containerd's cap, per
// stream) make an answer the kubelet refuses. CRI-O caps the two together
// at 16 MiB (conmon's --log-global-size-max), as here, less 1 KiB.
const MaxExecOutput = 16<<20 - 1<<10

// ExecOptions describes one process to run in a running container.
type ExecOptions struct {
	// Args is the command line; Args[0] is looked up in the container's
	// PATH. Required.
	Args []string
	// Env is added to the container's environment ("NAME=value"); an
	// entry replaces the container's variable of the same name, a bare
	// "NAME" removes it.
	Env []string
	// Cwd is the absolute working directory; "" means the container's.
	Cwd string
	// User runs the process as another user; nil means the container's.
	User *specs.User
	// Timeout kills the process, and what it started, after this long;
	// 0 means no timeout (ctx still bounds the call).
	Timeout time.Duration
	// Output, for ExecSync, collects the output; the caller releases it
	// once done with the result. nil: one without a gate.
	Output *ExecOutput
}

// Validate checks the options of an exec: a command, an absolute working
// directory, a timeout that is not negative and named environment entries.
// Errors wrap errdefs.ErrInvalidArgument.
func (o ExecOptions) Validate() error {
	if len(o.Args) == 0 || o.Args[0] == "" {
		return fmt.Errorf("no command: %w", errdefs.ErrInvalidArgument)
	}
	if o.Cwd != "" && !filepath.IsAbs(o.Cwd) {
		return fmt.Errorf("working directory %q is not absolute: %w", o.Cwd, errdefs.ErrInvalidArgument)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("negative timeout: %w", errdefs.ErrInvalidArgument)
	}
	for _, kv := range o.Env {
		if name, _, _ := strings.Cut(kv, "="); name == "" {
			return fmt.Errorf("environment entry %q has no name: %w", kv, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// ExecResult is how an exec'd process ended.
type ExecResult struct {
	// Stdout and Stderr are the process's output, at most MaxExecOutput
	// bytes together.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated report output beyond
	// MaxExecOutput that was discarded.
	StdoutTruncated, StderrTruncated bool
	// ExitCode is the process's exit status, 128+signal when a signal
	// ended it, and -1 when it timed out.
	ExitCode int32
	// TimedOut is set when ExecOptions.Timeout expired and the process
	// was killed. As CRI-O does (and unlike containerd, which returns an
	// error), this is a result, not an error: ExitCode is -1 and the
	// output is what the process wrote until then. The CRI layer may add
	// a "command timed out" message to Stderr as CRI-O does.
	TimedOut bool
}

// ExecStreamOptions describes one interactive process to run in a running
// container.
type ExecStreamOptions struct {
	// Args is the command line; Args[0] is looked up in the container's
	// PATH. Required.
	Args []string
	// Tty gives the process a terminal: its stdin, stdout and stderr,
	// copied from Stdin and to Stdout. Stderr is not used.
	Tty bool
	// Stdin is copied to the process's stdin; at its end the process
	// reads end of file (without Tty). nil: the process's stdin is empty.
	Stdin io.Reader
	// Stdout and Stderr receive the process's output; nil discards it.
	Stdout, Stderr io.Writer
	// Resize delivers the terminal's size, first and on every change;
	// only used with Tty. A size larger than MaxTerminalSize is cut to it.
	Resize <-chan Size
}

// AttachOptions are the streams of an attach.
type AttachOptions struct {
	// Stdin is sent to the container's stdin (which must have been
	// created with Stdin or Terminal); nil sends nothing.
	Stdin io.Reader
	// Stdout and Stderr receive what the container writes from now on;
	// nil discards it. With a terminal, everything is stdout.
	Stdout, Stderr io.Writer
	// Tty is set when the container has a terminal: then Resize is
	// applied to it, and the end of Stdin does not end the attach.
	Tty bool
	// StdinOnce is set when the container was created with StdinOnce:
	// its stdin is closed when Stdin ends, and the attach lasts until the
	// container exits.
	StdinOnce bool
	// Resize delivers the terminal's size, first and on every change.
	// A size larger than MaxTerminalSize is cut to it.
	Resize <-chan Size
}
