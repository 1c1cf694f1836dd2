package cgroups

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/procfs"
)

// The functions in this file write: they place a runtime's monitor process
// (conmon, a shim) in a cgroup and remove a container's cgroup that its
// runtime lost track of. Every mounted hierarchy is used, whatever Mode.

// Mount is one mounted cgroup hierarchy.
type Mount struct {
	Dir    string // mount point
	Cpuset bool   // a v1 hierarchy with the cpuset controller
	V2     bool   // the unified (cgroup2) hierarchy
}

// removeWait bounds the wait for a cgroup's killed processes to leave it.
const removeWait = 5 * time.Second

// MoveProcess moves pid into the cgroup at path (relative to each
// hierarchy's root) in every mounted cgroup hierarchy, v1 and v2, creating
// directories where missing. New v1 cpuset cgroups get their parent's
// cpus and mems, without which no process may join them.
func MoveProcess(pid int, path string) error {
	rel, mounts, err := hierarchies(path)
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return errors.New("no cgroup hierarchy mounted")
	}
	for _, m := range mounts {
		dir, err := makeCgroup(m, rel)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// makeCgroup creates the cgroup at rel in hierarchy m where missing, with
// v1 cpuset cgroups that have no cpus or mems given their parent's, and
// returns its directory.
func makeCgroup(m Mount, rel string) (string, error) {
	dir := m.Dir
	for elem := range strings.SplitSeq(strings.TrimPrefix(rel, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, elem)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		if m.Cpuset {
			if err := inheritCpuset(parent, dir); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// Remove removes the cgroup at path (relative to each hierarchy's root)
// in every mounted hierarchy, killing the processes left in it. A cgroup
// that is gone counts as removed.
func Remove(ctx context.Context, path string) error {
	rel, mounts, err := hierarchies(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := removeDir(ctx, filepath.Join(m.Dir, rel)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hierarchies returns the cleaned cgroup path (never the root) and the
// hierarchies mounted in the daemon's mount namespace.
func hierarchies(path string) (string, []Mount, error) {
	rel, err := relPath(path)
	if err != nil {
		return "", nil, err
	}
	mounts, err := selfMounts()
	return rel, mounts, err
}

// relPath cleans a cgroup path and refuses the root.
func relPath(path string) (string, error) {
	rel := filepath.Clean("/" + path)
	if rel == "/" {
		return "", fmt.Errorf("cgroup path %q names the root", path)
	}
	return rel, nil
}

// selfMounts returns the cgroup hierarchies mounted in the daemon's mount
// namespace.
func selfMounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMounts(f)
}

// removeDir kills the processes in the cgroup at dir and removes it.
func removeDir(ctx context.Context, dir string) error {
	deadline := time.Now().Add(removeWait)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, field := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		err = os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove cgroup %s: %w", dir, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func inheritCpuset(parent, dir string) error {
	for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(cur)) > 0 {
			continue
		}
		val, err := os.ReadFile(filepath.Join(parent, file))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), val, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ParseMounts returns the cgroup and cgroup2 mounts in a
// /proc/<pid>/mountinfo, one per mount point.
func ParseMounts(r io.Reader) ([]Mount, error) {
	all, err := procfs.ParseMountinfo(r)
	if err != nil {
		return nil, err
	}
	var mounts []Mount
	seen := make(map[string]bool)
	for _, mi := range all {
		// 36 35 0:31 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
		if (mi.FSType != "cgroup" && mi.FSType != "cgroup2") || seen[mi.Point] {
			continue
		}
		seen[mi.Point] = true
		m := Mount{Dir: mi.Point, V2: mi.FSType == "cgroup2"}
		if mi.FSType == "cgroup" {
			for opt := range strings.SplitSeq(mi.SuperOptions, ",") {
				if opt == "cpuset" {
					m.Cpuset = true
				}
			}
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}
