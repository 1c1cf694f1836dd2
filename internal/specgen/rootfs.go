package specgen

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// maxRootFileSize bounds what readFileInRoot reads: an image's /etc/passwd
// is small, and an image is not trusted.
const maxRootFileSize = 16 << 20

// openRoot opens a rootfs directory for readFileInRoot.
func openRoot(root string) (int, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return fd, nil
}

// readFileInRoot reads the regular file name inside the directory rootFd,
// resolving every symlink and ".." as if that directory were "/": an
// image's /etc/passwd that links to /etc/shadow, or to
// ../../../etc/passwd, reads the image's own file (or none), never the
// host's. Errors wrap fs.ErrNotExist when the file is missing.
func readFileInRoot(rootFd int, name string) ([]byte, error) {
	fd, err := openInRoot(rootFd, name)
	if err != nil {
		return nil, err
	}
	return readFd(fd, name)
}

// readFd reads and closes fd, which must be a regular file of at most
// maxRootFileSize bytes.
func readFd(fd int, name string) ([]byte, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s in the rootfs is not a regular file: %w", name, errdefs.ErrInvalidArgument)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRootFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRootFileSize {
		return nil, fmt.Errorf("%s in the rootfs is larger than %d bytes: %w", name, maxRootFileSize, errdefs.ErrInvalidArgument)
	}
	return data, nil
}

// openFlags open for reading without blocking on a FIFO or taking a
// terminal; readFileInRoot then refuses anything but a regular file.
const openFlags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK

// openInRoot opens name inside rootFd with openat2(RESOLVE_IN_ROOT), or,
// where the kernel lacks it (before 5.6) or a seccomp filter refuses it,
// with openInRootFallback.
func openInRoot(rootFd int, name string) (int, error) {
	how := unix.OpenHow{Flags: openFlags, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for range 16 {
		fd, err := unix.Openat2(rootFd, name, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			// EAGAIN: a rename raced with ".." resolution; try again.
			continue
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
			return openInRootFallback(rootFd, name)
		default:
			return -1, &fs.PathError{Op: "openat2", Path: name, Err: err}
		}
	}
	return openInRootFallback(rootFd, name)
}

// maxSymlinks is the kernel's limit on symlinks followed in one lookup.
const maxSymlinks = 40

// openInRootFallback resolves name one component at a time from rootFd,
// the way RESOLVE_IN_ROOT does: an absolute symlink restarts at rootFd and
// ".." stops there. It walks by file descriptor (O_PATH|O_NOFOLLOW), so a
// directory renamed during the walk cannot lead out of the root, and opens
// the last component with O_NOFOLLOW, so a symlink swapped in after the
// check fails instead of being followed.
func openInRootFallback(rootFd int, name string) (int, error) {
	fail := func(err error) (int, error) {
		return -1, &fs.PathError{Op: "open in root", Path: name, Err: err}
	}
	var dirs []int // descriptors of the directories below the root, deepest last
	defer func() {
		for _, d := range dirs {
			unix.Close(d)
		}
	}()
	cur := func() int {
		if len(dirs) == 0 {
			return rootFd
		}
		return dirs[len(dirs)-1]
	}
	parts := pathParts(name)
	links := 0
	for len(parts) > 0 {
		part := parts[0]
		parts = parts[1:]
		if part == ".." {
			if len(dirs) > 0 {
				unix.Close(dirs[len(dirs)-1])
				dirs = dirs[:len(dirs)-1]
			}
			continue
		}
		fd, err := unix.Openat(cur(), part, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkFd(fd)
			unix.Close(fd)
			if err != nil {
				return fail(err)
			}
			if links++; links > maxSymlinks {
				return fail(unix.ELOOP)
			}
			if strings.HasPrefix(target, "/") {
				for _, d := range dirs {
					unix.Close(d)
				}
				dirs = nil
			}
			parts = append(pathParts(target), parts...)
		case unix.S_IFDIR:
			dirs = append(dirs, fd)
		default:
			unix.Close(fd)
			if len(parts) > 0 {
				return fail(unix.ENOTDIR)
			}
			rfd, err := unix.Openat(cur(), part, openFlags|unix.O_NOFOLLOW, 0)
			if err != nil {
				return fail(err)
			}
			return rfd, nil
		}
	}
	// The name resolved to a directory.
	return fail(unix.EISDIR)
}

// pathParts splits a path into its components, dropping empty ones and ".".
func pathParts(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// readlinkFd reads the symlink an O_PATH|O_NOFOLLOW descriptor refers to.
func readlinkFd(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size >= unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
	}
}
