package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// reopenTimeout bounds the wait for conmon to reopen the log file.
const reopenTimeout = 5 * time.Second

// ctlFile is conmon's control FIFO in the bundle. conmon (src/ctrl.c,
// process_terminal_ctrl_line) reads lines "<type> <height> <width>\n";
// type 1 resizes the terminal, type 2 (REOPEN_LOGS_EVENT) reopens the log
// files. Newer conmons reject sizes outside 0..1000, so the unused
// numbers are 0.
const (
	ctlFile         = "ctl"
	ctlReopenLogMsg = "2 0 0\n"
)

// ReopenLog asks the conmon of container id to reopen its log file, for
// CRI ReopenContainerLog after the kubelet renamed the file away, and
// returns once conmon has done so: a new file exists at the log path.
//
// conmon creates the new file as <path>.tmp and renames it over the path
// (reopen_k8s_file), so a file still at the path is replaced, not
// appended to. A container without a log file has nothing to reopen.
//
// An unknown ID gives an error wrapping errdefs.ErrNotFound. A stopped
// container, or one whose conmon is gone, gives
// errdefs.ErrFailedPrecondition and no new file is created, as the CRI
// asks. So does a log directory that no longer exists: conmon exits when
// it cannot create the file, which would leave the container without a
// monitor.
func (r *Runtime) ReopenLog(ctx context.Context, id string) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	if st.Status == runtime.StatusStopped || st.Status == runtime.StatusUnknown {
		return fmt.Errorf("reopen log of container %s: container is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	monitor := st.MonitorPid
	if monitor == 0 {
		return fmt.Errorf("reopen log of container %s: conmon is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(monitor) + "/cmdline")
	if err != nil || !cmdlineHasCID(cmdline, id) {
		return fmt.Errorf("reopen log of container %s: conmon is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	logPath := conmonLogPath(cmdline)
	if logPath == "" {
		return nil
	}
	if fi, err := os.Stat(filepath.Dir(logPath)); err != nil || !fi.IsDir() {
		return fmt.Errorf("reopen log of container %s: log directory %s is gone: %w", id, filepath.Dir(logPath), errdefs.ErrFailedPrecondition)
	}

	// conmon always creates a new file, so a new inode at the path shows
	// that it has reopened, whether or not the old file was moved away.
	before, beforeErr := os.Stat(logPath)
	if err := writeCtl(filepath.Join(st.Bundle, ctlFile), ctlReopenLogMsg); err != nil {
		if errors.Is(err, unix.ENXIO) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("reopen log of container %s: conmon is not listening: %w", id, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	reopened := func() bool {
		fi, err := os.Stat(logPath)
		return err == nil && (beforeErr != nil || !os.SameFile(before, fi))
	}
	gone := func() bool { return !isMonitorOf(monitor, id) }
	if !waitUntil(ctx, reopenTimeout, func() bool { return reopened() || gone() }) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reopen log of container %s: %w", id, err)
		}
		return fmt.Errorf("reopen log of container %s: conmon did not reopen %s within %v", id, logPath, reopenTimeout)
	}
	if !reopened() {
		return fmt.Errorf("reopen log of container %s: conmon exited: %w", id, errdefs.ErrFailedPrecondition)
	}
	log.G(ctx).Debug("container log reopened", "id", id, "path", logPath)
	return nil
}

// writeCtl writes one message to conmon's control FIFO without blocking:
// with no reader (conmon gone) the open fails with ENXIO instead of
// waiting for one, and a message under PIPE_BUF is written whole or not
// at all.
func writeCtl(path, msg string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeNamedPipe {
		return fmt.Errorf("%s is not a FIFO", path)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Write(fd, []byte(msg))
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	if n != len(msg) {
		return fmt.Errorf("write %s: short write", path)
	}
	return nil
}

// conmonLogPath returns the k8s-file log path on a conmon command line
// (/proc/<pid>/cmdline), or "" if it logs nowhere else. conmon takes
// --log-path [driver:]path, repeatedly; a path without a driver is
// k8s-file.
func conmonLogPath(cmdline []byte) string {
	args := strings.Split(string(cmdline), "\x00")
	for i := 0; i < len(args); i++ {
		var val string
		switch a := args[i]; {
		case (a == "--log-path" || a == "-l") && i+1 < len(args):
			i++
			val = args[i]
		case strings.HasPrefix(a, "--log-path="):
			val = strings.TrimPrefix(a, "--log-path=")
		default:
			continue
		}
		if p, ok := strings.CutPrefix(val, "k8s-file:"); ok {
			return p
		}
		if filepath.IsAbs(val) {
			return val
		}
	}
	return ""
}
