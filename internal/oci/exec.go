package oci

import (
	"bufio"
	"context"
	"encoding/json"
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

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

// ExecSync runs the runtime's exec directly rather than through conmon
// (CRI-O's `conmon --exec --exec-process-spec -T`):
//
//   - stdout and stderr come straight from two pipes into bounded
//     buffers; conmon would write them to a CRI-format log file that has
//     to be parsed back, and a sync pipe protocol on top;
//   - a probe costs one runtime process, not conmon plus its double fork;
//   - conmon's -T takes whole seconds (g_timeout_add_seconds) and on
//     expiry kills only the exec'd pid, not what it started; here the
//     timeout is a time.Duration and the whole process group is killed.
//
// The price: the daemon is runc's parent, so if the daemon dies during an
// exec nobody enforces its timeout; the process runs to its end and runc
// with it. And only the process's parent learns its exit status: that is
// runc (the daemon must not be a child subreaper, see the package doc),
// which in the foreground copies the process's output through pipes of
// its own and exits only once they are closed. So, as with `runc exec`
// and `docker exec`, the call lasts until the process has exited and
// closed its output: a child it left in the background still holding
// stdout keeps the call open until the Timeout, which kills the process's
// group, that child included. A child that detaches (its own session,
// output redirected) is left alone. conmon (a subreaper, as CRI-O uses
// it) returns when the process exits; that would be worth its cost for
// execs that must outlive the daemon, but neither ExecSync nor an
// interactive Exec (exec_stream.go) should: both end with their client.

const (
	// execKillGrace bounds each step of killing a timed-out exec: waiting
	// for the runtime to report the process's pid, and waiting for the
	// runtime to exit once the process is dead.
	execKillGrace = 2 * time.Second
	// execOutputGrace is how long ExecSync keeps reading output after the
	// runtime exited. A process that left a child behind holding stdout
	// (`daemon &`) would otherwise keep the pipe, and the call, open.
	execOutputGrace = time.Second
)

// ExecSync runs a process in container id, which must be running, and
// waits for it. The process gets the container's process settings from
// the bundle's config.json (environment, working directory, user,
// capabilities, no_new_privileges, rlimits, AppArmor and SELinux labels),
// without a terminal, with runtime.ExecOptions applied on top, and stdin from
// /dev/null.
//
// An unknown ID gives an error wrapping errdefs.ErrNotFound, a container
// that is not running errdefs.ErrFailedPrecondition. A process that runs
// and exits, whatever its status, is a result; an error means that it
// could not be started, or that ctx ended, in which case the process was
// killed as on a timeout.
// The runtime refusing to start the program the exec names (not found, not
// executable) is the request's error: errdefs.ErrInvalidArgument.
func (r *Runtime) ExecSync(ctx context.Context, id string, opts runtime.ExecOptions) (runtime.ExecResult, error) {
	res, err := r.execSync(ctx, id, opts)
	return res, runtime.ClassifyExec(err)
}

// execSync is ExecSync before its failure is classified.
func (r *Runtime) execSync(ctx context.Context, id string, opts runtime.ExecOptions) (runtime.ExecResult, error) {
	files, done, err := r.prepareExec(ctx, id, opts, false)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	defer done()
	out := opts.Output
	if out == nil {
		out = runtime.NewExecOutput(nil)
	}
	res, runtimeMsg, err := r.runExec(ctx, id, files, opts.Timeout, out)
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if runtimeMsg != "" {
		return runtime.ExecResult{}, r.execFailure(ctx, id, runtimeMsg, res.ExitCode)
	}
	return res, nil
}

// prepareExec checks that container id runs and writes the process spec
// of an exec into a directory of its own in the bundle. done removes the
// directory.
func (r *Runtime) prepareExec(ctx context.Context, id string, opts runtime.ExecOptions, terminal bool) (files execFiles, done func(), err error) {
	if err := runtime.ValidateID(id); err != nil {
		return execFiles{}, nil, err
	}
	if err := opts.Validate(); err != nil {
		return execFiles{}, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return execFiles{}, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if st.Status != runtime.StatusRunning {
		return execFiles{}, nil, fmt.Errorf("exec in container %s: container is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	spec, err := runtime.ReadSpec(st.Bundle)
	if err != nil {
		return execFiles{}, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	proc, err := runtime.ExecProcess(spec.Process, opts)
	if err != nil {
		return execFiles{}, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	proc.Terminal = terminal

	// The bundle belongs to the container and is writable; a crash leaves
	// at most a small directory there, removed with the bundle.
	dir, err := os.MkdirTemp(st.Bundle, ".exec-")
	if err != nil {
		return execFiles{}, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	done = func() { os.RemoveAll(dir) }
	files = execFilesIn(dir)
	data, err := json.Marshal(proc)
	if err == nil {
		err = os.WriteFile(files.process, data, 0o600)
	}
	if err != nil {
		done()
		return execFiles{}, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	return files, done, nil
}

// execFailure is the error for an exec whose runtime failed, before or
// while starting the process, with runtimeMsg and exit status code. The
// container may have stopped since the state check: that is NotFound or
// FailedPrecondition.
func (r *Runtime) execFailure(ctx context.Context, id, runtimeMsg string, code int32) error {
	if st, stErr := r.State(ctx, id); errdefs.IsNotFound(stErr) {
		return fmt.Errorf("exec in container %s: %s: %w", id, runtimeMsg, errdefs.ErrNotFound)
	} else if stErr == nil && st.Status != runtime.StatusRunning {
		return fmt.Errorf("exec in container %s: container is %s: %s: %w", id, st.Status, runtimeMsg, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("exec in container %s: runtime exec: %s (exit status %d)", id, runtimeMsg, code)
}

// execFiles are the files of one exec, in a directory of its own.
type execFiles struct {
	process string // the process spec, --process
	pid     string // written by the runtime once the process runs, --pid-file
	log     string // the runtime's own messages, JSON lines, --log
}

func execFilesIn(dir string) execFiles {
	return execFiles{
		process: filepath.Join(dir, "process.json"),
		pid:     filepath.Join(dir, "pid"),
		log:     filepath.Join(dir, "runtime.log"),
	}
}

// execArgs builds the runtime's command line for an exec. --log keeps the
// runtime's warnings out of the process's stderr, which the runtime hands
// to the process as its own, and tells runtime failures from the
// process's exit status.
func execArgs(cfg Config, id string, files execFiles) []string {
	return append(cfg.globalArgs(),
		"--log", files.log,
		"--log-format", "json",
		"exec",
		"--process", files.process,
		"--pid-file", files.pid,
		id,
	)
}

// runExec runs the runtime's exec and waits for it, killing the process
// on timeout or when ctx ends. runtimeMsg is set when the runtime itself
// failed; res.ExitCode is then the runtime's exit status.
func (r *Runtime) runExec(ctx context.Context, id string, files execFiles, timeout time.Duration, out *runtime.ExecOutput) (res runtime.ExecResult, runtimeMsg string, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return runtime.ExecResult{}, "", err
	}
	defer outR.Close()
	defer outW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		return runtime.ExecResult{}, "", err
	}
	defer errR.Close()
	defer errW.Close()

	// runc copies the process's stdout and stderr to its own.
	cmd := exec.Command(r.cfg.RuntimePath, execArgs(r.cfg, id, files)...)
	cmd.Stdout, cmd.Stderr = outW, errW
	// As in runtimeCmd: a signal to the daemon's process group must not
	// reach the runtime.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return runtime.ExecResult{}, "", fmt.Errorf("start runtime exec: %w", err)
	}
	outW.Close()
	errW.Close()

	copies := []*outputCopy{copyOutput(out.Stdout, outR), copyOutput(out.Stderr, errR)}
	// Whatever happens below, the readers are stopped before returning; a
	// reader cut off stops waiting for out's gate too.
	defer func() {
		drainOutput(execOutputGrace, out.Stop, copies...)
		out.Stop()
		out.Result(&res)
	}()

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}

	var waitErr error
	select {
	case waitErr = <-exited:
	case <-timer:
		log.G(ctx).Debug("exec timed out, killing it", "id", id, "timeout", timeout)
		// The output until now is the answer: it waits for no gate.
		out.Stop()
		if err := killExec(ctx, cmd.Process, files.pid, exited, nil); err != nil {
			return runtime.ExecResult{}, "", err
		}
		return runtime.ExecResult{ExitCode: -1, TimedOut: true}, "", nil
	case <-ctx.Done():
		out.Stop()
		if err := killExec(ctx, cmd.Process, files.pid, exited, nil); err != nil {
			log.G(ctx).Error("kill cancelled exec", "id", id, "err", err)
		}
		return runtime.ExecResult{}, "", ctx.Err()
	}

	code, err := exitCode(waitErr)
	if err != nil {
		return runtime.ExecResult{}, "", fmt.Errorf("runtime exec: %w", err)
	}
	if code != 0 {
		// runc exits with the process's status; it logs an error only when
		// it failed itself (then with status 255 or 1).
		runtimeMsg = runtimeLogErrors(files.log)
	}
	return runtime.ExecResult{ExitCode: code}, runtimeMsg, nil
}

// outputCopy copies one output of an exec, from the read end of a pipe
// or a terminal, to a writer.
type outputCopy struct {
	r    *os.File
	done chan struct{}
}

// copyOutput starts copying r to w until r ends. When w fails, the rest
// is read and discarded: the process must not block on a full pipe
// because nobody reads its output any more.
func copyOutput(w io.Writer, r *os.File) *outputCopy {
	c := &outputCopy{r: r, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if _, err := io.Copy(w, r); err != nil && !isReadEnd(err) {
			_, _ = io.Copy(io.Discard, r)
		}
	}()
	return c
}

// isReadEnd reports whether err came from reading, not writing: the end
// of a pipe or terminal (a terminal's master reads EIO once the other
// side is closed), or a deadline set by drainOutput.
func isReadEnd(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Op == "read"
}

// drainOutput gives the copies grace to reach the end of their input,
// then cuts them off. runc exits only after its output is closed, so the
// grace only matters for a runtime that hands the process the pipes
// themselves, where a child left behind could hold them open. A copy
// stuck writing to its writer (a client that stopped reading) is given
// up on after execKillGrace more; it ends when its writer fails.
func drainOutput(grace time.Duration, cutOff func(), copies ...*outputCopy) {
	done := make([]<-chan struct{}, len(copies))
	for i, c := range copies {
		done[i] = c.done
	}
	runtime.AwaitDone(grace, execKillGrace, done, func(i int) {
		_ = copies[i].r.SetReadDeadline(time.Now())
		if cutOff != nil {
			cutOff()
		}
	})
}

// exitCode turns the runtime's wait result into an exit status: its own
// exit code, which is the process's (runc reports a signal as 128+signal
// itself), or 128+signal if the runtime was killed.
func exitCode(waitErr error) (int32, error) {
	if waitErr == nil {
		return 0, nil
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) {
		return 0, waitErr
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int32(128 + ws.Signal()), nil
	}
	return int32(exitErr.ExitCode()), nil
}

// killExec kills a timed-out or cancelled exec: the process the runtime
// started and its process group, after which the runtime reaps it, sees
// its output closed and exits by itself. Killing the runtime alone would
// not do: the process lives in the container, not under it. The runtime
// is killed only if it did not start the process, or does not exit, in
// time. It returns once the runtime has been reaped.
func killExec(ctx context.Context, runtime *os.Process, pidFile string, exited <-chan error, watch *execWatch) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undo.Timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	// runc writes the pid file right after starting the process; before
	// that there is nothing in the container to kill.
	deadline := time.Now().Add(execKillGrace)
	killed := false
	// What a watch saw while the exec ran: its processes are there even
	// if the process itself has exited since.
	seen := watch.group()
	for time.Now().Before(deadline) {
		// Again on every tick until the runtime exits: a process may be
		// forked, or reparented, while the first kill runs.
		if pid, err := readPidFile(pidFile); err == nil {
			killExecGroup(pid, runtime.Pid, &seen)
			if !killed {
				killed = true
				deadline = time.Now().Add(execKillGrace)
			}
		}
		select {
		case <-exited:
			return nil
		case <-tick.C:
		case <-ctx.Done():
			deadline = time.Now()
		}
	}
	if !killed {
		log.G(ctx).Warn("runtime exec did not report the process's pid, killing the runtime", "runtime_pid", runtime.Pid)
	}
	_ = runtime.Kill()
	select {
	case <-exited:
		return nil
	case <-time.After(execKillGrace):
		return fmt.Errorf("runtime exec %d still running after SIGKILL", runtime.Pid)
	}
}

// killExecGroup sends SIGKILL to the exec'd process at pid, to its
// process group and to its session. runc makes the process a session and
// group leader (setsid), so the group is pid and holds what the process
// started, like the sleep under `sh -c "sleep 10; echo"`, or a background
// child that still holds the output after the process exited; the
// session also holds the jobs an interactive shell on a terminal put in
// process groups of their own. crun's intermediate process calls setsid
// and forks the process, so there group and session are that
// intermediate's number, which only the exec's processes hold once it
// has exited. A group or session that is the daemon's or the runtime's
// own is never killed.
//
// The kernel reuses a number only once no process, group or session uses
// it. So while pid is the runtime's child (the runtime's exec stays the
// parent and reaps it), pid, group and session are the exec's; once it is
// reaped, pid's group and session are still the exec's while they have
// members, and empty otherwise. Only a different process at pid (ppid not
// the runtime) means the number was freed and reused: then there is
// nothing of the exec's left to kill.
func killExecGroup(pid, runtimePid int, seen *execGroup) {
	st, err := procfs.ReadStat(pid)
	switch {
	case err == nil && childOfRuntime(st, runtimePid):
		_ = unix.Kill(pid, unix.SIGKILL)
		if g := groupOf(st, runtimePid); g.pgid > 0 || g.sid > 0 {
			*seen = g
		}
	case err != nil:
		// Reaped: what the runtime still waits for is in the group or
		// the session, pid's (runc's) or those seen before, and among
		// the runtime's children: runc and crun are subreapers of their
		// exec, and an orphan of the process (crun's group and session
		// are a number not seen yet when the process exited by itself
		// first) is reparented to them.
		_ = unix.Kill(-pid, unix.SIGKILL)
		killSession(pid)
		killChildren(runtimePid)
	}
	if seen.pgid > 0 {
		_ = unix.Kill(-seen.pgid, unix.SIGKILL)
	}
	if seen.sid > 0 {
		killSession(seen.sid)
	}
}

// killChildren sends SIGKILL to the children of the runtime at
// runtimePid, until none is left.
func killChildren(runtimePid int) {
	killWhere(func(st procfs.Stat) bool { return st.PPID == runtimePid })
}

// execGroup is the process group and session of an exec's process, as
// seen while the process was the runtime's; 0 where it is the daemon's
// or the runtime's own.
type execGroup struct{ pgid, sid int }

// execWatch learns an interactive exec's process as soon as the runtime
// has written its pid: for resizing its terminal, and for a kill that
// comes after the process has exited by itself (a client gone whose
// stdin's end made it exit), when its group and session can no longer be
// read — runc's are the pid, but crun's are its intermediate's. ExecSync
// has none: its kills come while the process runs.
type execWatch struct {
	runtimePid int
	// found is closed once pid and seen are set, or the watch gave up.
	found chan struct{}
	pid   int
	seen  execGroup
	done  chan struct{}
}

// watchExec starts watching pidFile for the exec of the runtime at
// runtimePid, for up to execKillGrace; stop ends it.
func watchExec(pidFile string, runtimePid int) *execWatch {
	w := &execWatch{runtimePid: runtimePid, found: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.found)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(execKillGrace)
		for {
			if pid, err := readPidFile(pidFile); err == nil {
				if st, err := procfs.ReadStat(pid); err == nil && childOfRuntime(st, runtimePid) {
					w.pid, w.seen = pid, groupOf(st, runtimePid)
				}
				return
			}
			select {
			case <-tick.C:
			case <-deadline:
				return
			case <-w.done:
				return
			}
		}
	}()
	return w
}

func (w *execWatch) stop() { close(w.done) }

// group is the group and session the watch saw, if it has finished
// (nothing for a nil watch).
func (w *execWatch) group() execGroup {
	if w == nil {
		return execGroup{}
	}
	select {
	case <-w.found:
		return w.seen
	default:
		return execGroup{}
	}
}

// process waits for the watch, or for stop, and returns the exec's pid
// (0: not seen).
func (w *execWatch) process(stop <-chan struct{}) int {
	select {
	case <-w.found:
		return w.pid
	case <-stop:
		return 0
	}
}

// groupOf is st's group and session, but for the daemon's and the
// runtime's own.
func groupOf(st procfs.Stat, runtimePid int) execGroup {
	var g execGroup
	if st.PGRP > 0 && st.PGRP != unix.Getpgrp() && st.PGRP != runtimePid {
		g.pgid = st.PGRP
	}
	if st.Session > 0 && st.Session != getsid() && st.Session != runtimePid {
		g.sid = st.Session
	}
	return g
}

// childOfRuntime reports whether the process st describes is the
// runtime's child, or the child of the runtime's child: crun's
// intermediate process forks the exec'd one and exits, after which the
// runtime (a subreaper) is its parent.
func childOfRuntime(st procfs.Stat, runtimePid int) bool {
	if st.PPID == runtimePid {
		return true
	}
	parent, err := procfs.ReadStat(st.PPID)
	return err == nil && parent.PPID == runtimePid
}

// getsid is the daemon's session.
func getsid() int {
	sid, _ := unix.Getsid(0)
	return sid
}

// killSession sends SIGKILL to every process in session sid.
func killSession(sid int) {
	killWhere(func(st procfs.Stat) bool { return st.Session == sid })
}

// killWhere sends SIGKILL to every live process whose stat matches. A
// process may fork while the list is read, so it is read until nothing
// is found.
func killWhere(match func(procfs.Stat) bool) {
	for range 5 {
		found := false
		entries, _ := os.ReadDir("/proc")
		for _, ent := range entries {
			pid, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			if st, err := procfs.ReadStat(pid); err == nil && !st.Zombie() && match(st) {
				_ = unix.Kill(pid, unix.SIGKILL)
				found = true
			}
		}
		if !found {
			return
		}
	}
}

// runtimeLogErrors returns the error messages in a runtime log written
// with --log-format json, joined, or "" if there are none.
func runtimeLogErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return parseRuntimeLog(io.LimitReader(f, 1<<20))
}

func parseRuntimeLog(r io.Reader) string {
	var msgs []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 256<<10)
	for sc.Scan() {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) != nil {
			continue
		}
		if (entry.Level == "error" || entry.Level == "fatal") && entry.Msg != "" {
			msgs = append(msgs, entry.Msg)
		}
	}
	return truncateMiddle(strings.Join(msgs, "; "), maxMessageLen)
}
