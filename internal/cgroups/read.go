package cgroups

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// readControl reads a cgroup control file whole. It is os.ReadFile without
// the runtime's poller: cgroup files are pollable kernfs files, so every
// os.Open of one also registers it with epoll and every Close removes it,
// a third of the cost of a statistics read, which the stats collector does
// a dozen times per container.
func readControl(path string) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
