package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// An interactive exec (CRI Exec, `kubectl exec -it`) runs the runtime's
// exec in the foreground, as ExecSync does, so that the daemon, its
// parent, learns the exit status. With a terminal, runc allocates the
// process's pseudo-terminal inside the container and copies between it
// and a terminal of its own (its "host console", found on its stdio); it
// takes --console-socket only together with --detach, and a detached
// exec is reparented to the container's init, which may not reap it, so
// its status would be lost. So the daemon gives runc a pseudo-terminal of
// its own as stdin, stdout and stderr, and controlling terminal, as CRI-O
// does: a resize set on its master reaches runc as SIGWINCH, and runc
// applies the size to the container's terminal.

// Exec runs a process in container id, which must be running, copies
// its stdio from and to the streams in opts, and returns its exit status
// once it has exited and its output has been copied (128+signal when a
// signal ended it). The process gets the container's process settings,
// as in ExecSync.
//
// When ctx ends first, the process, its process group and its session
// are killed, as for a timed-out ExecSync, and ctx's error is returned:
// the caller cancels ctx when its client goes away, so nothing it
// started is left running. A Read on Stdin that is under way when Exec
// returns is not waited for; its data is dropped.
//
// An unknown ID gives an error wrapping errdefs.ErrNotFound, a container
// that is not running errdefs.ErrFailedPrecondition.
func (r *Runtime) Exec(ctx context.Context, id string, opts runtime.ExecStreamOptions) (int32, error) {
	files, done, err := r.prepareExec(ctx, id, runtime.ExecOptions{Args: opts.Args}, opts.Tty)
	if err != nil {
		return 0, err
	}
	defer done()
	code, runtimeMsg, err := r.runStreamExec(ctx, id, files, opts)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if runtimeMsg != "" {
		return 0, r.execFailure(ctx, id, runtimeMsg, code)
	}
	return code, nil
}

// runStreamExec runs the runtime's exec with opts' streams and waits for
// it, killing the process when ctx ends. runtimeMsg is set when the
// runtime itself failed; code is then the runtime's exit status.
func (r *Runtime) runStreamExec(ctx context.Context, id string, files execFiles, opts runtime.ExecStreamOptions) (code int32, runtimeMsg string, err error) {
	cmd := exec.Command(r.cfg.RuntimePath, execArgs(r.cfg, id, files)...)
	var stdio *execStdio
	if opts.Tty {
		stdio, err = terminalStdio(cmd, opts)
	} else {
		stdio, err = pipeStdio(cmd, opts)
	}
	if err != nil {
		return 0, "", err
	}
	defer stdio.close()
	if err := cmd.Start(); err != nil {
		stdio.closeChild()
		return 0, "", fmt.Errorf("start runtime exec: %w", err)
	}
	watch := watchExec(files.pid, cmd.Process.Pid)
	defer watch.stop()
	stdio.watch = watch
	stdio.started(ctx)

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-ctx.Done():
		log.G(ctx).Debug("exec cancelled, killing it", "id", id, "reason", context.Cause(ctx))
		if err := killExec(ctx, cmd.Process, files.pid, exited, watch); err != nil {
			log.G(ctx).Error("kill cancelled exec", "id", id, "err", err)
		}
		drainOutput(0, nil, stdio.outputs...)
		return 0, "", ctx.Err()
	}
	drainOutput(execOutputGrace, nil, stdio.outputs...)

	code, err = exitCode(waitErr)
	if err != nil {
		return 0, "", fmt.Errorf("runtime exec: %w", err)
	}
	if code != 0 {
		// As in runExec: runc logs an error only when it failed itself.
		runtimeMsg = runtimeLogErrors(files.log)
	}
	return code, runtimeMsg, nil
}

// execStdio connects the runtime's stdio to an interactive exec's
// streams.
type execStdio struct {
	opts runtime.ExecStreamOptions
	// child are the runtime's ends, closed once it has started.
	child []*os.File
	// parent are the daemon's ends, closed by close.
	parent []*os.File
	// stdin, when set, is where opts.Stdin is copied to; closeStdin
	// closes it at the end of opts.Stdin, so that the process reads end
	// of file (a pipe; a terminal stays open).
	stdin      *os.File
	closeStdin bool
	// terminal is the master of the runtime's terminal, with Tty.
	terminal *os.File
	// outputs, set by started, are the copies of the runtime's output.
	outputs []*outputCopy
	// outR and errR are the read ends of the runtime's output, when
	// copied.
	outR, errR *os.File
	stop       chan struct{}
	// watch learns the exec'd process: resizes go to its terminal too.
	watch *execWatch
	// settled, with a terminal, is closed once settleNewlines has run (or
	// the process was not found); the client's input waits for it.
	settled chan struct{}
}

// pipeStdio gives the runtime a pipe per stream that opts asks for, and
// /dev/null for the others. runc copies between them and pipes of its own
// to the process.
func pipeStdio(cmd *exec.Cmd, opts runtime.ExecStreamOptions) (_ *execStdio, retErr error) {
	s := &execStdio{opts: opts, stop: make(chan struct{})}
	defer func() {
		if retErr != nil {
			s.close()
			s.closeChild()
		}
	}()
	if opts.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		s.child, s.parent = append(s.child, r), append(s.parent, w)
		cmd.Stdin, s.stdin, s.closeStdin = r, w, true
	}
	for _, out := range []struct {
		w    io.Writer
		dst  *io.Writer
		read **os.File
	}{{opts.Stdout, &cmd.Stdout, &s.outR}, {opts.Stderr, &cmd.Stderr, &s.errR}} {
		if out.w == nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		s.child, s.parent = append(s.child, w), append(s.parent, r)
		*out.dst, *out.read = w, r
	}
	// As in runtimeCmd: a signal to the daemon's process group must not
	// reach the runtime.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return s, nil
}

// terminalStdio gives the runtime a new pseudo-terminal as stdin, stdout,
// stderr and controlling terminal, in a session of its own.
func terminalStdio(cmd *exec.Cmd, opts runtime.ExecStreamOptions) (*execStdio, error) {
	master, slave, err := openTerminal()
	if err != nil {
		return nil, fmt.Errorf("allocate terminal: %w", err)
	}
	s := &execStdio{opts: opts, stop: make(chan struct{}), terminal: master}
	s.child, s.parent = []*os.File{slave}, []*os.File{master}
	// Termios set through the master apply to the terminal (the slave).
	if err := makeRaw(master); err != nil {
		s.close()
		s.closeChild()
		return nil, fmt.Errorf("set terminal to raw mode: %w", err)
	}
	// A size that is already there is the one the runtime starts with
	// (runc sizes the process's terminal from its own when it starts).
	select {
	case size, ok := <-opts.Resize:
		if ok {
			_ = setTerminalSize(master, size)
		}
	default:
	}
	if opts.Stdin != nil {
		s.stdin = master
	}
	s.outR = master
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	return s, nil
}

// started closes the runtime's ends and starts the copies and, with a
// terminal, the resizing and settleNewlines, which the input copy waits
// for.
func (s *execStdio) started(ctx context.Context) {
	s.closeChild()
	if s.terminal != nil {
		s.settled = make(chan struct{})
		go func() {
			defer close(s.settled)
			if pid := s.watch.process(s.stop); pid != 0 {
				if err := settleNewlines(s.terminal, pid, s.watch.runtimePid); err != nil {
					log.G(ctx).Debug("exec terminal: newlines not settled", "pid", pid, "err", err)
				}
			}
		}()
	}
	if s.stdin != nil {
		go func() {
			// Input typed before the process's terminal is settled would
			// let a shell finish its first line, and restore settings it
			// saved before the runtime set its terminal up.
			if s.settled != nil {
				select {
				case <-s.settled:
				case <-s.stop:
					return
				}
			}
			_, _ = io.Copy(s.stdin, s.opts.Stdin)
			if s.closeStdin {
				s.stdin.Close()
			}
		}()
	}
	if s.outR != nil {
		s.outputs = append(s.outputs, copyOutput(runtime.WriterOrDiscard(s.opts.Stdout), s.outR))
	}
	if s.errR != nil {
		s.outputs = append(s.outputs, copyOutput(runtime.WriterOrDiscard(s.opts.Stderr), s.errR))
	}
	if s.terminal != nil && s.opts.Resize != nil {
		// Setting the size sends SIGWINCH to the runtime, the terminal's
		// foreground process.
		go runtime.ApplyResizes(s.opts.Resize, s.stop, func(size runtime.Size) {
			_ = setTerminalSize(s.terminal, size)
			_ = s.resizeProcessTerminal(size)
		})
	}
}

// resizeProcessTerminal sets size on the exec'd process's own terminal,
// the one in the container that the runtime copies to and from, through
// /proc/<pid>/fd/0. runc passes a size change on its terminal to it
// (SIGWINCH); crun before 1.9 (Debian 12 has 1.8.1) does not. The process
// may not have started yet: the watch waits for its pid. Nothing is done
// unless pid is still the runtime's child (a pid reused by then is not).
func (s *execStdio) resizeProcessTerminal(size runtime.Size) error {
	pid := s.watch.process(s.stop)
	if pid == 0 {
		return errors.New("the exec's process is not known")
	}
	f, err := openProcessTerminal(pid, s.watch.runtimePid)
	if err != nil {
		return err
	}
	defer f.Close()
	return setTerminalSize(f, size) // on a slave as on a master
}

func (s *execStdio) closeChild() {
	for _, f := range s.child {
		f.Close()
	}
	s.child = nil
}

// close stops the resizing and closes the daemon's ends: a stdin copy
// still under way fails at its next write.
func (s *execStdio) close() {
	close(s.stop)
	for _, f := range s.parent {
		f.Close()
	}
}

// openTerminal allocates a pseudo-terminal. The master is non-blocking
// (it takes read deadlines); the slave is for a child.
func openTerminal() (master, slave *os.File, retErr error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if retErr != nil {
			master.Close()
		}
	}()
	var n int
	if err := runtime.FdControl(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlock terminal: %w", err)
		}
		var err error
		if n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
			return fmt.Errorf("terminal number: %w", err)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	return master, slave, nil
}

// makeRaw puts the terminal whose master is f into raw mode as runc's
// console.SetRaw does (cfmakeraw, but OPOST kept, with the terminal's
// default ONLCR): no echo, no line editing, no input processing. The
// runtime's terminal carries bytes between the client and the process's
// terminal, which echoes and edits itself; runc sets this mode too, but
// only once it runs, and until then the input would be echoed. Which of
// the two terminals translates newlines is the runtime's choice, made
// race-free by settleNewlines (exec_terminal.go); runc starts copying
// the process's output before its SetRaw, so OPOST is on from the start
// here, else a newline copied in between would get no CR at all.
func makeRaw(f *os.File) error {
	return runtime.FdControl(f, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		t.Oflag |= unix.OPOST
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cflag &^= unix.CSIZE | unix.PARENB
		t.Cflag |= unix.CS8
		t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
		return unix.IoctlSetTermios(fd, unix.TCSETS, t)
	})
}

// setTerminalSize sets the size of the terminal whose master is f.
func setTerminalSize(f *os.File, size runtime.Size) error {
	size = size.Clamp()
	return runtime.FdControl(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
	})
}
