package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

// Files conmon and the runtime write into the bundle directory.
const (
	conmonPidFile    = "conmon.pid"
	containerPidFile = "pidfile"
	persistExitFile  = "exit"
)

// bundleLeftovers are the files conmon leaves in the bundle directory.
var bundleLeftovers = []string{conmonPidFile, containerPidFile, persistExitFile, runtime.OOMMarker, createLogFile, "attach", "ctl", "winsz"}

// createLogFile, in the bundle, is the runtime's own log of the create
// conmon runs (--log, JSON lines). Without it the runtime logs to its
// stderr, which is the container's: a warning it prints then (runc under
// the systemd driver: "skipping device /dev/char/10:200 for systemd")
// would land in the container's log.
const createLogFile = "runtime-create.log"

// monitorExitGrace is how long conmon gets to exit by itself once it has
// nothing left to do, before it is killed.
const monitorExitGrace = 5 * time.Second

// Create runs conmon, which runs `<runtime> create`, and returns once the
// container exists, with the pid of its init process (blocked until Start).
//
// An ID the runtime already knows is rejected with ErrAlreadyExists, and a
// stale exit file for the ID is removed first. On any failure Create kills
// the conmon it started, deletes the runtime state and conmon's files, and
// returns an error that includes the runtime's own message. It gives up
// when ctx ends or after Config.CreateTimeout, whichever comes first.
//
// A sysctl of the spec that the kernel refused is the request's error: it
// gives a *runtime.SysctlError (errdefs.ErrInvalidArgument).
func (r *Runtime) Create(ctx context.Context, opts runtime.CreateOptions) (pid int, retErr error) {
	pid, err := r.create(ctx, opts, "")
	return pid, runtime.ClassifyCreate(err, opts.BundleDir)
}

// create is Create, or Restore when restorePath (CRIU's images) is set.
func (r *Runtime) create(ctx context.Context, opts runtime.CreateOptions, restorePath string) (pid int, retErr error) {
	if err := opts.Validate(); err != nil {
		return 0, fmt.Errorf("create container %s: %w", opts.ID, err)
	}
	// The rollback below deletes the runtime state for this ID, so an ID
	// that is already taken must be refused before anything is started.
	// runc and crun keep a container's state in <root>/<id>: without it
	// the runtime does not know the ID, and no runtime command is needed
	// to tell (it costs a fork and exec on every create).
	if err := r.checkUnknown(ctx, opts.ID); err != nil {
		return 0, fmt.Errorf("create container %s: %w", opts.ID, err)
	}
	if err := r.removeFiles(opts.ID, opts.BundleDir); err != nil {
		return 0, fmt.Errorf("create container %s: remove stale files: %w", opts.ID, err)
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CreateTimeout)
	defer cancel()

	// Registered before conmon starts: a conmon that failed half way may
	// have left a log file, runtime state or processes behind.
	var monitor int
	reported := false
	defer undo.OnError(ctx, &retErr, "clean up failed create", func(ctx context.Context) error {
		grace := time.Duration(0)
		if reported {
			grace = monitorExitGrace // conmon exits by itself after reporting
		}
		return r.cleanupCreate(ctx, opts, monitor, grace)
	})

	syncPipe, monitor, err := r.startConmon(ctx, opts, restorePath)
	if err != nil {
		return 0, fmt.Errorf("create container %s: %w", opts.ID, err)
	}
	defer syncPipe.Close()

	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		pid, err := readSyncMessage(syncPipe)
		ch <- result{pid, err}
	}()
	select {
	case res := <-ch:
		reported = true
		if res.err != nil {
			// runc prints its error to stderr (conmon's message) and to
			// the log; crun only to the log.
			if msg := runtimeLogErrors(filepath.Join(opts.BundleDir, createLogFile)); msg != "" && !strings.Contains(res.err.Error(), msg) {
				return 0, fmt.Errorf("create container %s: %w: %s", opts.ID, res.err, msg)
			}
			return 0, fmt.Errorf("create container %s: %w", opts.ID, res.err)
		}
		log.G(ctx).Debug("container created", "id", opts.ID, "pid", res.pid, "conmon_pid", monitor)
		return res.pid, nil
	case <-ctx.Done():
		syncPipe.Close() // unblocks the reader
		return 0, fmt.Errorf("create container %s: waiting for conmon and the runtime's create: %w",
			opts.ID, timeoutError(parent, ctx, r.cfg.CreateTimeout))
	}
}

// startConmon starts conmon for opts, lets it go past the start pipe, reaps
// the intermediate process and returns the read end of the sync pipe and
// the pid of the detached conmon.
func (r *Runtime) startConmon(ctx context.Context, opts runtime.CreateOptions, restorePath string) (syncPipe *os.File, monitor int, retErr error) {
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	defer syncW.Close()
	defer func() {
		if retErr != nil {
			syncR.Close()
		}
	}()
	startR, startW, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	defer startR.Close()
	defer startW.Close()

	// conmon prints option and setup errors before it detaches; an
	// unlinked file keeps them without tying cmd.Wait to a pipe that the
	// detached conmon might still hold.
	output, err := os.CreateTemp(opts.BundleDir, ".conmon-output-")
	if err != nil {
		return nil, 0, err
	}
	defer output.Close()
	if err := os.Remove(output.Name()); err != nil {
		return nil, 0, err
	}

	args := conmonArgs(r.cfg, opts)
	if restorePath != "" {
		// conmon runs `<runtime> restore --detach --image-path <path>
		// --work-path <bundle>` instead of create.
		args = append(args, "--restore", restorePath)
	}
	log.G(ctx).Debug("starting conmon", "id", opts.ID, "path", r.cfg.ConmonPath, "args", args)
	cmd := exec.Command(r.cfg.ConmonPath, args...)
	cmd.Dir = opts.BundleDir
	cmd.Env = append(runtime.MonitorEnv(os.Environ()), "_OCI_SYNCPIPE=3", "_OCI_STARTPIPE=4")
	cmd.Stdout, cmd.Stderr = output, output
	cmd.ExtraFiles = []*os.File{syncW, startR} // fds 3 and 4
	// Its own process group: a signal to the daemon's group must not reach
	// it before it has detached (it calls setsid itself afterwards).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	spawned, err := opts.StartMonitor(cmd)
	if err != nil {
		return nil, 0, fmt.Errorf("start conmon: %w", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	// From here on the intermediate process is reaped on every path.
	abort := func(err error) (*os.File, int, error) {
		_ = cmd.Process.Kill()
		<-waitErr
		return nil, 0, err
	}
	syncW.Close()
	startR.Close()

	if opts.PlaceMonitor != nil {
		if err := opts.PlaceMonitor(ctx, cmd.Process.Pid); err != nil {
			return abort(fmt.Errorf("place conmon: %w", err))
		}
	} else if opts.MonitorCgroup != "" && !spawned {
		if err := cgroups.MoveProcess(cmd.Process.Pid, opts.MonitorCgroup); err != nil {
			return abort(fmt.Errorf("move conmon to cgroup %s: %w", opts.MonitorCgroup, err))
		}
	}
	if _, err := startW.Write([]byte{0}); err != nil {
		// conmon closed the pipe: it exited before reading it, which it
		// does on bad options or an unusable log path. Its exit says why.
		select {
		case werr := <-waitErr:
			if werr != nil {
				return nil, 0, fmt.Errorf("conmon: %w%s", werr, outputSuffix(output))
			}
			return nil, 0, fmt.Errorf("signal conmon to start: %w", err)
		case <-time.After(time.Second):
			return abort(fmt.Errorf("signal conmon to start: %w", err))
		}
	}
	startW.Close()

	select {
	case err := <-waitErr:
		if err != nil {
			return nil, 0, fmt.Errorf("conmon: %w%s", err, outputSuffix(output))
		}
	case <-ctx.Done():
		return abort(fmt.Errorf("waiting for conmon to detach: %w", ctx.Err()))
	}
	// The intermediate process writes the detached conmon's pid before it
	// exits with status 0.
	monitor, err = readPidFile(filepath.Join(opts.BundleDir, conmonPidFile))
	if err != nil {
		return nil, 0, fmt.Errorf("conmon pid: %w", err)
	}
	return syncR, monitor, nil
}

// cleanupCreate undoes a failed Create: it gives conmon grace to exit by
// itself, then kills conmon and whatever is left in its process group
// (the runtime's create command, a hung wrapper), deletes the runtime
// state and removes conmon's files and the log file.
func (r *Runtime) cleanupCreate(ctx context.Context, opts runtime.CreateOptions, monitor int, grace time.Duration) error {
	var errs []error
	if monitor == 0 {
		// conmon may have detached before the intermediate process was
		// killed; the pid file, removed before the start, tells.
		monitor = monitorPID(opts.BundleDir, opts.ID)
	}
	if monitor > 0 {
		if err := stopMonitor(ctx, monitor, opts.ID, grace, true); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := r.runtimeCmd(ctx, "delete", "--force", opts.ID); err != nil && !r.isNotExist(err, opts.ID) {
		errs = append(errs, fmt.Errorf("delete runtime state: %w", err))
	}
	// A create cut short (conmon killed while the runtime's create ran)
	// leaves the container's cgroup, and at times a "runc init" in it,
	// that the runtime's delete does not know of.
	if err := runtime.RemoveSpecCgroup(ctx, opts.BundleDir, r.cfg.Units); err != nil {
		errs = append(errs, fmt.Errorf("remove container cgroup: %w", err))
	}
	if err := r.removeFiles(opts.ID, opts.BundleDir); err != nil {
		errs = append(errs, err)
	}
	if opts.LogPath != "" {
		if err := os.Remove(opts.LogPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// conmonArgs builds conmon's command line for a create.
func conmonArgs(cfg Config, opts runtime.CreateOptions) []string {
	logPath := "none"
	if opts.LogPath != "" {
		logPath = "k8s-file:" + opts.LogPath
	}
	args := []string{
		// conmon 2.1 takes --api-version as a flag; the "1" after it is
		// ignored there and keeps the command line valid for a conmon that
		// reads a value. Version 1 answers {"data": pid} on the sync pipe.
		"--api-version", "1",
		"--cid", opts.ID,
		"--cuuid", opts.ID,
		"--name", opts.ID,
		"--runtime", cfg.RuntimePath,
		"--runtime-arg", "--root=" + cfg.RuntimeRoot,
		"--runtime-arg", "--log=" + filepath.Join(opts.BundleDir, createLogFile),
		"--runtime-arg", "--log-format=json",
		"--bundle", opts.BundleDir,
		"--container-pidfile", filepath.Join(opts.BundleDir, containerPidFile),
		"--conmon-pidfile", filepath.Join(opts.BundleDir, conmonPidFile),
		// conmon writes <persist-dir>/exit before <exit-dir>/<id> and gives
		// up on the second if the first fails, so this directory must exist.
		"--persist-dir", opts.BundleDir,
		"--exit-dir", cfg.ExitDir,
		"--socket-dir-path", cfg.SocketDir,
		"--log-path", logPath,
		"--log-level", cfg.ConmonLogLevel,
	}
	if cfg.SystemdCgroup {
		args = append(args, "--runtime-arg", "--systemd-cgroup", "--systemd-cgroup")
	}
	if cfg.LogSizeMax > 0 {
		args = append(args, "--log-size-max", strconv.FormatInt(cfg.LogSizeMax, 10))
	}
	if cfg.NoPivot {
		args = append(args, "--no-pivot")
	}
	// As CRI-O: with a terminal, stdin goes through the pty.
	if opts.Terminal {
		args = append(args, "--terminal")
	} else if opts.Stdin {
		args = append(args, "--stdin")
		if !opts.StdinOnce {
			args = append(args, "--leave-stdin-open")
		}
	}
	return args
}

// outputSuffix returns what conmon printed before it detached, as a suffix
// for an error message.
func outputSuffix(f *os.File) string {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 16<<10))
	if msg := runtimeMessage(b); msg != "" {
		return ": " + msg
	}
	return ""
}

func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid file %s: %q", path, b)
	}
	return pid, nil
}

// removeFiles removes the exit file, the attach symlink and conmon's
// files in the bundle (bundle may be "").
func (r *Runtime) removeFiles(id, bundle string) error {
	paths := []string{filepath.Join(r.cfg.ExitDir, id), filepath.Join(r.cfg.SocketDir, id)}
	if bundle != "" {
		for _, name := range bundleLeftovers {
			paths = append(paths, filepath.Join(bundle, name))
		}
	}
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkUnknown returns nil when the runtime does not know id, an error
// wrapping errdefs.ErrAlreadyExists when it does.
func (r *Runtime) checkUnknown(ctx context.Context, id string) error {
	if _, err := os.Lstat(filepath.Join(r.cfg.RuntimeRoot, id)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	switch _, err := r.State(ctx, id); {
	case err == nil:
		return errdefs.ErrAlreadyExists
	case !errdefs.IsNotFound(err):
		return err
	}
	return nil
}
