package shim

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// process refers to a shim, which is not the daemon's child (it is
// reparented to init), through a pidfd: a recycled pid cannot be mistaken
// for it, and a pidfd reports the exit as soon as the process is a zombie
// (init on some hosts reaps late).
type process struct {
	pid int
	f   *os.File // the pidfd, in the runtime's poller
}

// openProcess returns a handle on pid. The caller must check afterwards
// that pid still is the process it means. An error wrapping unix.ESRCH
// means that there is no such process. It needs Linux 5.3 (pidfd_open).
func openProcess(pid int) (*process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, unix.ESRCH)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, &os.SyscallError{Syscall: "pidfd_open", Err: err}
	}
	// Non-blocking, os.NewFile puts it into the runtime's poller, which
	// wakes wait when the pidfd becomes readable (the process exited).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &process{pid: pid, f: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))}, nil
}

// wait blocks until the process has terminated, or until close; it
// returns an error in the second case.
func (p *process) wait() error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool { return pidfdReadable(int(fd)) })
}

// signal sends sig to the process; a process that has terminated is not
// an error.
func (p *process) signal(sig syscall.Signal) error {
	return p.control(func(fd int) error {
		err := unix.PidfdSendSignal(fd, sig, nil, 0)
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return err
	})
}

func (p *process) close() { p.f.Close() }

func (p *process) control(fn func(fd int) error) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
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
