package specgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// CheckExecutable looks for the program of spec s in the container's
// root filesystem the way runc does before it creates the container
// (exec.LookPath in the container, with the spec's PATH and working
// directory), and refuses a program that is surely not there or not
// executable: runc would refuse it too, but only after the runtime
// started to make the container, with an unclassified error.
//
// It refuses only what it is sure of. A path that reaches one of the
// spec's mount destinations is taken as found, since what the mount
// brings is not in the rootfs. Symlinks are
// followed inside rootfs, as if it were "/"; the walk only reads metadata.
func CheckExecutable(rootfs string, s *specs.Spec) error {
	if s == nil || s.Process == nil || len(s.Process.Args) == 0 {
		return fmt.Errorf("spec has no process args: %w", errdefs.ErrInvalidArgument)
	}
	var mounts []string
	for _, m := range s.Mounts {
		mounts = append(mounts, path.Clean(m.Destination))
	}
	lk := rootLookup{root: rootfs, mounts: mounts}
	if _, err := lk.stat(s.Process.Cwd); errors.Is(err, errThroughProc) {
		return fmt.Errorf("working directory %q: %w: %w", s.Process.Cwd, err, errdefs.ErrInvalidArgument)
	}
	name := s.Process.Args[0]
	if strings.Contains(name, "/") {
		p := name
		if !path.IsAbs(p) {
			p = path.Join(s.Process.Cwd, p)
		}
		if err := lk.executable(p); err != nil {
			return fmt.Errorf("program %q: %w: %w", name, err, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	pathEnv := ""
	for _, e := range s.Process.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathEnv = v
		}
	}
	// As exec.LookPath: an empty PATH has no entries at all, an empty
	// entry is the working directory, a relative one is below it.
	if pathEnv != "" {
		for _, dir := range strings.Split(pathEnv, ":") {
			if !path.IsAbs(dir) {
				dir = path.Join(s.Process.Cwd, dir)
			}
			if lk.executable(path.Join(dir, name)) == nil {
				return nil
			}
		}
	}
	return fmt.Errorf("program %q: no executable file of that name in the image's $PATH (%q): %w", name, pathEnv, errdefs.ErrInvalidArgument)
}

// rootLookup resolves container paths inside a root filesystem.
type rootLookup struct {
	root   string
	mounts []string // clean absolute mount destinations
}

// errNotExecutable: the path is a directory or has no execute bit.
var errNotExecutable = errors.New("not an executable file")

// executable returns nil when the container path p is an executable file
// or may be one (it reaches a mount), fs.ErrNotExist or errNotExecutable
// when it surely is not.
func (lk rootLookup) executable(p string) error {
	fi, err := lk.stat(p)
	switch {
	case errors.Is(err, errMounted):
		return nil
	case err != nil:
		return err
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return errNotExecutable
	}
	return nil
}

// errMounted: the path reaches a mount destination.
var errMounted = errors.New("under a mount")

// errThroughProc: the path goes below /proc, where /proc/self/fd/N,
// /proc/self/cwd and /proc/self/root are the runtime's own descriptors and
// directories while it sets the container up: a working directory or
// program reached that way is how runc's CVE-2024-21626 ("leaky vessels")
// let an image reach the host's file system. runc 1.1.12 closes the leak;
// podbay refuses the image's path whatever runtime a handler runs.
var errThroughProc = errors.New("goes below /proc, which resolves to the runtime's own files while it starts the container")

// stat follows p inside the root as the container will see it, symlinks
// included (at most maxSymlinks), and returns what it names. A missing
// component, or a file where a directory was wanted, is fs.ErrNotExist.
func (lk rootLookup) stat(p string) (fs.FileInfo, error) {
	resolved := "/"
	parts := pathParts(p)
	links := 0
	for len(parts) > 0 {
		part := parts[0]
		parts = parts[1:]
		if part == ".." {
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, part)
		if next == "/proc" && len(parts) > 0 {
			return nil, errThroughProc
		}
		if lk.mounted(next) {
			return nil, errMounted
		}
		fi, err := os.Lstat(filepath.Join(lk.root, next))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
				return nil, fs.ErrNotExist
			}
			return nil, err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(lk.root, next))
			if err != nil {
				return nil, err
			}
			if links++; links > maxSymlinks {
				return nil, fmt.Errorf("too many levels of symbolic links: %w", fs.ErrNotExist)
			}
			if path.IsAbs(target) {
				resolved = "/"
			}
			parts = append(pathParts(target), parts...)
		case len(parts) == 0:
			return fi, nil
		case !fi.IsDir():
			return nil, fs.ErrNotExist
		default:
			resolved = next
		}
	}
	// p named a directory (or the root).
	return os.Stat(filepath.Join(lk.root, resolved))
}

// mounted reports whether the container path p is a mount destination or
// below one.
func (lk rootLookup) mounted(p string) bool {
	for _, d := range lk.mounts {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
