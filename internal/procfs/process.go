package procfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process refers to a process that is not the daemon's child (a
// container's init, a daemonised shim) through a pidfd: a recycled pid
// cannot be mistaken for it, and the pidfd reports the exit as soon as the
// process is a zombie (init on some hosts reaps late). On kernels before
// 5.3, which lack pidfd_open, it falls back to the bare pid, checked with
// kill(pid, 0); a zombie then counts as running.
type Process struct {
	pid int
	f   *os.File // the pidfd, in the runtime's poller; nil without pidfd_open

	closeOnce sync.Once
	closed    chan struct{}
}

// fallbackPoll is how often a Process without a pidfd checks its pid in
// Wait.
const fallbackPoll = 50 * time.Millisecond

// OpenProcess returns a handle on pid. The caller must check afterwards
// that pid still is the process it means (its runtime still reports it).
// An error wrapping unix.ESRCH means that there is no such process.
func OpenProcess(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, unix.ESRCH)
	}
	p := &Process{pid: pid, closed: make(chan struct{})}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		if err := unix.Kill(pid, 0); err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, &os.SyscallError{Syscall: "pidfd_open", Err: err})
	}
	// Non-blocking, os.NewFile puts it into the runtime's poller, which
	// wakes Wait when the pidfd becomes readable (the process exited).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	p.f = os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))
	return p, nil
}

// Pid returns the process's pid.
func (p *Process) Pid() int { return p.pid }

// HasPidfd reports whether the handle is a pidfd, which pins the pid (a
// kernel without pidfd_open gives a handle on the pid number only).
func (p *Process) HasPidfd() bool { return p.f != nil }

// Exited reports whether the process has terminated.
func (p *Process) Exited() bool {
	if p.f == nil {
		return errors.Is(unix.Kill(p.pid, 0), unix.ESRCH)
	}
	exited := false
	_ = fdControl(p.f, func(fd int) error {
		exited = pidfdReadable(fd)
		return nil
	})
	return exited
}

// Wait blocks until the process has terminated, or until Close; it
// returns an error in the second case.
func (p *Process) Wait() error {
	if p.f == nil {
		t := time.NewTicker(fallbackPoll)
		defer t.Stop()
		for !p.Exited() {
			select {
			case <-p.closed:
				return os.ErrClosed
			case <-t.C:
			}
		}
		return nil
	}
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool { return pidfdReadable(int(fd)) })
}

// Present reports whether the process can still be signalled: it runs,
// or it has exited but is not reaped yet (a zombie, which Exited counts as
// exited where there is a pidfd).
func (p *Process) Present() bool {
	if p.f == nil {
		return unix.Kill(p.pid, 0) == nil
	}
	return fdControl(p.f, func(fd int) error { return unix.PidfdSendSignal(fd, 0, nil, 0) }) == nil
}

// WaitDeadline waits until the process has terminated or deadline has
// passed, and reports whether it terminated.
func (p *Process) WaitDeadline(deadline time.Time) bool {
	if p.f != nil && p.f.SetReadDeadline(deadline) == nil {
		defer p.f.SetReadDeadline(time.Time{})
		if rc, err := p.f.SyscallConn(); err == nil {
			_ = rc.Read(func(fd uintptr) bool { return pidfdReadable(int(fd)) })
			return p.Exited()
		}
	}
	// No pidfd, or one outside the runtime's poller: poll.
	for !p.Exited() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(fallbackPoll, time.Until(deadline)))
	}
	return true
}

// Signal sends sig to the process; a process that has terminated is not
// an error.
func (p *Process) Signal(sig syscall.Signal) error {
	var err error
	if p.f == nil {
		err = unix.Kill(p.pid, sig)
	} else {
		err = fdControl(p.f, func(fd int) error { return unix.PidfdSendSignal(fd, sig, nil, 0) })
	}
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// Close releases the handle; a Wait under way returns.
func (p *Process) Close() {
	p.closeOnce.Do(func() {
		close(p.closed)
		if p.f != nil {
			p.f.Close()
		}
	})
}

func pidfdReadable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err != unix.EINTR {
			return err == nil && n > 0
		}
	}
}

// InitOfPidNamespace reports whether the process is the init (pid 1) of a
// pid namespace below the one /proc shows, so that its death takes every
// process of that namespace with it (the kernel kills them). It needs a
// pidfd: the answer read from /proc/<pid>/status counts only if the
// process is still alive afterwards, so a recycled pid cannot give it.
func (p *Process) InitOfPidNamespace() bool {
	if p.f == nil {
		return false
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return false
	}
	return nsInit(status) && !p.Exited()
}

// nsInit reports whether a /proc/<pid>/status says its process is pid 1 of
// a nested pid namespace: its NSpid line has more than one pid, the last 1.
func nsInit(status []byte) bool {
	for line := range strings.Lines(string(status)) {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		pids := strings.Fields(rest)
		return len(pids) > 1 && pids[len(pids)-1] == "1"
	}
	return false
}

// fdControl runs fn on f's descriptor without putting f into blocking
// mode, as f.Fd would.
func fdControl(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
}
