// Package oci is the runtime.Runtime that drives one OCI runtime binary
// (runc, crun, or a wrapper with their command line) with conmon as the
// per-container monitor, the way CRI-O does.
//
// The package keeps no per-container state in memory. Everything it needs
// is on disk, so a new Runtime on the same directories (after the daemon was
// restarted, or killed) sees the same containers:
//
//	<RuntimeRoot>/<id>/      the runtime's own state (runc state, runc list)
//	<ExitDir>/<id>           the exit code as decimal text, written by conmon when
//	                         the container's init process exits; its mtime is the exit time
//	<SocketDir>/<id>         conmon's symlink to the bundle (the attach socket is <bundle>/attach)
//	<bundle>/conmon.pid      conmon's pid
//	<bundle>/pidfile         the container init's pid (runtime --pid-file)
//	<bundle>/exit            a copy of the exit code (conmon --persist-dir)
//	<bundle>/oom             created by conmon when the container's memory cgroup reports an OOM
//	                         kill; Exited reports it as ExitStatus.OOMKilled
//	<bundle>/attach, ctl, winsz  conmon's attach socket (Attach) and control fifos
//	                         (ReopenLog and Attach's resizes write to ctl)
//	<bundle>/.exec-*/        one per ExecSync or Exec under way: the process spec,
//	                         the runtime's pid file and log; removed when it ends
//	<bundle>/config.json     read by ExecSync for the container's process settings;
//	                         Update rewrites its linux.resources (atomically)
//
// conmon is started in its own process group and double-forks, so it is
// not a child of the daemon and outlives it; the daemon only reaps the
// short-lived intermediate process. The daemon must therefore not make
// itself a child subreaper (PR_SET_CHILD_SUBREAPER) unless it reaps every
// child, or exited conmons would stay zombies under it.
package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/runtime"
)

// Defaults for the zero values of the corresponding Config fields.
const (
	DefaultCreateTimeout    = 2 * time.Minute
	DefaultCommandTimeout   = time.Minute
	DefaultExitPollInterval = 2 * time.Second
	DefaultConmonLogLevel   = "warning"
)

// Config of one runtime handler. Paths must be absolute.
type Config struct {
	// Name is the runtime handler name, e.g. "runc".
	Name string
	// RuntimePath is the runtime binary (runc, crun or a wrapper with the
	// same command line).
	RuntimePath string
	// RuntimeRoot is passed as --root to every runtime call, including the
	// create that conmon runs.
	RuntimeRoot string
	// SystemdCgroup runs the runtime with --systemd-cgroup (its cgroupsPath
	// is then "slice:prefix:name") and conmon with --systemd-cgroup.
	SystemdCgroup bool
	// Units stops the systemd unit of a create cut short (systemd driver);
	// nil under cgroupfs.
	Units runtime.UnitStopper
	// Features is what the runtime and the kernel support beyond the
	// baseline (ocifeatures.Detect); Features() reports it.
	Features ocifeatures.Handler
	// ConmonPath is the conmon binary.
	ConmonPath string
	// ExitDir is conmon's --exit-dir: a file named after the container ID,
	// holding the exit code, appears there when the container exits.
	ExitDir string
	// SocketDir is conmon's --socket-dir-path: it holds one symlink per
	// container, named after the ID, to the directory with the attach
	// socket.
	SocketDir string
	// ConmonLogLevel is conmon's --log-level: "error", "warning", "info",
	// "debug" or "trace". "" means DefaultConmonLogLevel. conmon's own log
	// only reaches podbay for failures before it detaches; after that it
	// goes to /dev/null (there is no syslog on the hosts podbay targets).
	ConmonLogLevel string
	// LogSizeMax caps each container log file, in bytes (conmon
	// --log-size-max). 0 means no cap.
	LogSizeMax int64
	// NoPivot makes the runtime use chroot instead of pivot_root; needed
	// when the root filesystem is on a ramdisk.
	NoPivot bool
	// CreateTimeout bounds Create when the caller's context allows longer.
	// 0 means DefaultCreateTimeout.
	CreateTimeout time.Duration
	// CommandTimeout bounds each direct runtime call (state, start, kill,
	// delete). 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// ExitPollInterval is how often Wait re-checks the exit directory in
	// case an inotify event was missed. 0 means DefaultExitPollInterval.
	ExitPollInterval time.Duration
}

// The capabilities an oci handler offers beyond runtime.Runtime.
var (
	_ runtime.Runtime         = (*Runtime)(nil)
	_ runtime.Checkpointer    = (*Runtime)(nil)
	_ runtime.Restorer        = (*Runtime)(nil)
	_ runtime.Pauser          = (*Runtime)(nil)
	_ runtime.FeaturesRuntime = (*Runtime)(nil)
	_ runtime.MonitorWaiter   = (*Runtime)(nil)
)

// Runtime drives one runtime handler. It is safe for concurrent use, but
// calls for the same container ID must be serialized by the caller (the
// CRI server's per-container state does that).
type Runtime struct {
	cfg   Config
	exits *exitWatcher
}

// New validates cfg, creates RuntimeRoot, ExitDir and SocketDir if missing,
// and starts watching ExitDir. Call Close to stop the watcher.
func New(cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("runtime handler %q: %w", cfg.Name, err)
	}
	for _, dir := range []string{cfg.RuntimeRoot, cfg.ExitDir, cfg.SocketDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("runtime handler %q: %w", cfg.Name, err)
		}
	}
	exits, err := newExitWatcher(cfg.ExitDir, cfg.ExitPollInterval)
	if err != nil {
		return nil, fmt.Errorf("runtime handler %q: %w", cfg.Name, err)
	}
	return &Runtime{cfg: cfg, exits: exits}, nil
}

// Name returns the runtime handler name.
func (r *Runtime) Name() string { return r.cfg.Name }

// Close stops the exit watcher. Wait calls in progress return an error;
// containers and their conmon processes are not affected.
func (r *Runtime) Close() error {
	return r.exits.close()
}

var conmonLogLevels = map[string]bool{"error": true, "warning": true, "info": true, "debug": true, "trace": true}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		return c, fmt.Errorf("name is empty: %w", errdefs.ErrInvalidArgument)
	}
	for _, p := range []struct{ field, path string }{
		{"RuntimePath", c.RuntimePath},
		{"ConmonPath", c.ConmonPath},
		{"RuntimeRoot", c.RuntimeRoot},
		{"ExitDir", c.ExitDir},
		{"SocketDir", c.SocketDir},
	} {
		if !filepath.IsAbs(p.path) {
			return c, fmt.Errorf("%s %q is not an absolute path: %w", p.field, p.path, errdefs.ErrInvalidArgument)
		}
	}
	for _, bin := range []string{c.RuntimePath, c.ConmonPath} {
		if err := checkExecutable(bin); err != nil {
			return c, err
		}
	}
	if c.ConmonLogLevel == "" {
		c.ConmonLogLevel = DefaultConmonLogLevel
	}
	if !conmonLogLevels[c.ConmonLogLevel] {
		return c, fmt.Errorf("conmon log level %q: %w", c.ConmonLogLevel, errdefs.ErrInvalidArgument)
	}
	if c.LogSizeMax < 0 {
		return c, fmt.Errorf("negative log size limit: %w", errdefs.ErrInvalidArgument)
	}
	if c.CreateTimeout <= 0 {
		c.CreateTimeout = DefaultCreateTimeout
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	if c.ExitPollInterval <= 0 {
		c.ExitPollInterval = DefaultExitPollInterval
	}
	return c, nil
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file: %w", path, errdefs.ErrInvalidArgument)
	}
	return nil
}

// runtimeError is a runtime call that exited with an error.
type runtimeError struct {
	op      string // "state", "kill", …
	message string // the runtime's stderr, cleaned up by runtimeMessage
	err     error  // from exec
}

func (e *runtimeError) Error() string {
	if e.message == "" {
		return fmt.Sprintf("runtime %s: %v", e.op, e.err)
	}
	return fmt.Sprintf("runtime %s: %s (%v)", e.op, e.message, e.err)
}

func (e *runtimeError) Unwrap() error { return e.err }

// globalArgs are the runtime's options before its command: --root, and
// --systemd-cgroup under the systemd driver.
func (c Config) globalArgs() []string {
	args := []string{"--root", c.RuntimeRoot}
	if c.SystemdCgroup {
		args = append(args, "--systemd-cgroup")
	}
	return args
}

// runtimeCmd runs `<runtime> --root <root> op args...` and returns its
// stdout. The call is bounded by CommandTimeout.
func (r *Runtime) runtimeCmd(ctx context.Context, op string, args ...string) ([]byte, error) {
	return r.runtimeCmdInput(ctx, nil, op, args...)
}

// runtimeCmdInput is runtimeCmd with stdin (nil: /dev/null).
func (r *Runtime) runtimeCmdInput(ctx context.Context, stdin []byte, op string, args ...string) ([]byte, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CommandTimeout)
	defer cancel()

	argv := append(append(r.cfg.globalArgs(), op), args...)
	cmd := exec.CommandContext(ctx, r.cfg.RuntimePath, argv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	stdout, stderr := runtime.NewCappedBuffer(1<<20), runtime.NewCappedBuffer(64<<10)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A signal to the daemon's process group (Ctrl-C on a terminal) must
	// not interrupt a runtime half way through a state change.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A runtime that hangs is killed with what it started (a wrapper's
	// runtime, a hook), by its group id, which is its pid.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, timeoutError(parent, ctx, r.cfg.CommandTimeout))
		}
		return nil, &runtimeError{op: op, message: runtimeMessage(stderr.Bytes()), err: err}
	}
	return stdout.Bytes(), nil
}

// timeoutError is the error of a call bounded by ctx, a child of parent
// with the handler's timeout: explained when that timeout ended it.
func timeoutError(parent, ctx context.Context, timeout time.Duration) error {
	if parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within the runtime handler's timeout (%s), killed: %w", timeout, ctx.Err())
	}
	return ctx.Err()
}

// isNotExist reports whether err is the runtime saying that it does not
// know the container. runc says "container does not exist"; crun reports
// a missing status file; both keep their state in <root>/<id>, which is
// checked as well.
func (r *Runtime) isNotExist(err error, id string) bool {
	var re *runtimeError
	if !errors.As(err, &re) {
		return false
	}
	var exitErr *exec.ExitError
	if !errors.As(re.err, &exitErr) {
		return false // the runtime did not run, or was killed
	}
	if strings.Contains(re.message, "does not exist") {
		return true
	}
	_, statErr := os.Stat(filepath.Join(r.cfg.RuntimeRoot, id))
	return errors.Is(statErr, os.ErrNotExist)
}
