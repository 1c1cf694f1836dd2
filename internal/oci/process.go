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

	"github.com/podbay/podbay/internal/procfs"
)

// monitorPID returns the pid of the conmon monitoring container id, read
// from <bundle>/conmon.pid and checked against the process's command line,
// or 0 when that conmon is not running (exited, or the pid was reused).
func monitorPID(bundle, id string) int {
	if bundle == "" {
		return 0
	}
	pid, err := readPidFile(filepath.Join(bundle, conmonPidFile))
	if err != nil || !isMonitorOf(pid, id) {
		return 0
	}
	return pid
}

// awaitMonitor waits for the conmon of container id, whose pid is in
// bundle's conmon.pid, to be gone (see stopMonitor); an exiting conmon is
// waited for too. Nothing to wait for is not an error.
func awaitMonitor(ctx context.Context, bundle, id string) error {
	if bundle == "" {
		return nil
	}
	pid, err := readPidFile(filepath.Join(bundle, conmonPidFile))
	if err != nil || pid <= 0 || (!isMonitorOf(pid, id) && !exiting(pid)) {
		return nil
	}
	return stopMonitor(ctx, pid, id, monitorExitGrace, false)
}

// isMonitorOf reports whether pid is a running conmon for container id. An
// exited conmon that is not reaped yet has an empty command line and does
// not count.
func isMonitorOf(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && cmdlineHasCID(b, id)
}

// cmdlineHasCID reports whether a /proc/<pid>/cmdline passes --cid id.
func cmdlineHasCID(cmdline []byte, id string) bool {
	args := strings.Split(string(cmdline), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == "--cid" || args[i] == "-c") && args[i+1] == id {
			return true
		}
	}
	return false
}

// stopMonitor waits up to grace for the conmon at pid to exit by itself,
// then kills it with SIGKILL, together with its process group if group
// is set (conmon leads its own session; the group holds the runtime
// command it runs but not the container, which runc puts in a session of
// its own). The pid is checked to still be that conmon right before the
// kill; a process inside its exit (which may be a conmon that lost its
// command line, or, if the pid was given by a stale pid file, anything)
// is only waited for: it needs no kill.
func stopMonitor(ctx context.Context, pid int, id string, grace time.Duration, group bool) error {
	// An exiting conmon loses its command line early in the kernel's exit
	// (with its memory), and is gone only once that exit is through: a
	// pid cannot be reused before, so the exiting process is still ours.
	gone := func() bool { return !isMonitorOf(pid, id) && !exiting(pid) }
	if waitUntil(ctx, grace, gone) {
		return nil
	}
	target := pid
	if group {
		if pgid, err := unix.Getpgid(pid); err == nil && pgid == pid {
			target = -pid
		}
	}
	if gone() {
		return nil
	}
	killed := isMonitorOf(pid, id)
	if killed {
		if err := unix.Kill(target, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill conmon %d: %w", pid, err)
		}
	}
	if !waitUntil(ctx, monitorExitGrace, gone) {
		if !killed {
			return fmt.Errorf("conmon %d of container %s still inside its exit after %v", pid, id, grace+monitorExitGrace)
		}
		return fmt.Errorf("conmon %d of container %s still running after SIGKILL", pid, id)
	}
	return nil
}

// exiting reports whether pid is a process inside the kernel's exit: not
// yet a zombie (or reaped), but with PF_EXITING set.
func exiting(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.Exiting()
}

// waitUntil polls cond until it holds, d has passed or ctx ends, and
// returns cond's last value.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	if d <= 0 {
		return false
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	interval := 5 * time.Millisecond
	for {
		tick := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			tick.Stop()
			return cond()
		case <-deadline.C:
			tick.Stop()
			return cond()
		case <-tick.C:
		}
		if cond() {
			return true
		}
		interval = min(2*interval, 100*time.Millisecond)
	}
}
