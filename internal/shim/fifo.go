package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/runtime"
)

// mkfifo creates a FIFO at path, replacing a stale file there.
func mkfifo(path string) error {
	if err := removeIfExists(path); err != nil {
		return err
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return &os.PathError{Op: "mkfifo", Path: path, Err: err}
	}
	return nil
}

// fifoReader reads a FIFO that its writer opens at any time, before or
// after: the read side of a container's stdout, stderr or of a shim's log.
//
// The FIFO is opened without blocking, so that a writer's blocking open
// (the shim's) goes through at once. Such a read end returns end of file
// whenever no writer is connected, also before the first one came; the
// kernel tells the two apart for poll: it raises POLLHUP only once a
// writer has come and gone ("suppress EPOLLHUP until we have seen a
// writer", fs/pipe.c). Read waits while the FIFO is empty and no writer
// has been seen, and ends with io.EOF once the writers have gone and the
// FIFO is drained. Close makes a Read under way return.
type fifoReader struct {
	f *os.File
}

func openFifoReader(path string) (*fifoReader, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if fi.Mode().Type() != os.ModeNamedPipe {
		f.Close()
		return nil, fmt.Errorf("%s is not a FIFO", path)
	}
	return &fifoReader{f: f}, nil
}

func (r *fifoReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var readErr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, readErr = unix.Read(int(fd), p)
			if readErr != unix.EINTR {
				break
			}
		}
		switch {
		case readErr == unix.EAGAIN:
			return false // empty, a writer is connected: wait for data
		case readErr != nil || n > 0:
			return true
		}
		// Nothing and no writer: the end, or none has come yet.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, 0)
			if err != unix.EINTR {
				return err != nil || fds[0].Revents&unix.POLLHUP != 0
			}
		}
	})
	switch {
	case err != nil:
		// The raw connection reports a Close as its own error value.
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: fmt.Errorf("%w (%v)", os.ErrClosed, err)}
	case readErr != nil:
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: readErr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *fifoReader) Close() error { return r.f.Close() }

// openFifoWriter opens the write side of a FIFO whose reader comes later
// (a container's stdin, read by the shim). It is opened read-write, which
// never blocks and never fails for want of a reader; podbay never reads
// from it. Writes wait while the FIFO is full; Close makes them return.
func openFifoWriter(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().Type() != os.ModeNamedPipe {
		err = fmt.Errorf("%s is not a FIFO", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// isClosedRead reports whether err is a read ended by Close.
func isClosedRead(err error) bool {
	return errors.Is(err, os.ErrClosed)
}

// fifoDrainTimeout bounds waitFifoDrained.
const fifoDrainTimeout = 10 * time.Second

// waitFifoDrained waits until nothing written to the FIFO f is left
// unread (FIONREAD, TIOCINQ on Linux), ctx ends, or fifoDrainTimeout has passed.
func waitFifoDrained(ctx context.Context, f *os.File) {
	deadline := time.Now().Add(fifoDrainTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var n int
		err := runtime.FdControl(f, func(fd int) error {
			var err error
			n, err = unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
			return err
		})
		if err != nil || n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
