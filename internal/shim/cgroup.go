package shim

import (
	"bufio"
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

	"github.com/podbay/podbay/internal/oci"
)

// cgroupRemoveWait bounds the wait for a cgroup's killed processes to
// leave it.
const cgroupRemoveWait = 5 * time.Second

// removeTaskCgroup removes the cgroup that the bundle's config.json gives
// its container (linux.cgroupsPath, cgroupfs form) in every mounted
// hierarchy, killing what is left in it. A runtime create cut short (runc
// create killed between starting "runc init" and recording the container)
// leaves the cgroup, and at times a "runc init" in it, that no runtime
// delete knows of. A systemd cgroup ("slice:prefix:name") is left to the
// runtime. A bundle or cgroup that is gone counts as done.
func removeTaskCgroup(ctx context.Context, bundle string) error {
	spec, err := oci.ReadSpec(bundle)
	if err != nil || spec.Linux == nil {
		return nil
	}
	path := spec.Linux.CgroupsPath
	if path == "" || strings.Contains(path, ":") {
		return nil
	}
	rel := filepath.Clean("/" + path)
	if rel == "/" {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	mounts, err := cgroupMounts(f)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := removeCgroupDir(ctx, filepath.Join(m, rel)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroupDir kills the processes in the cgroup at dir and removes it.
func removeCgroupDir(ctx context.Context, dir string) error {
	deadline := time.Now().Add(cgroupRemoveWait)
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

// cgroupMounts returns the mount points of the cgroup and cgroup2
// hierarchies in a /proc/<pid>/mountinfo.
func cgroupMounts(r io.Reader) ([]string, error) {
	var dirs []string
	seen := make(map[string]bool)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// 36 35 0:31 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 1 || (tail[0] != "cgroup" && tail[0] != "cgroup2") {
			continue
		}
		// Mount points with spaces (escaped as \040) are not cgroup
		// hierarchies anyone mounts; they are skipped, not unescaped.
		dir := fields[4]
		if strings.Contains(dir, `\`) || seen[dir] {
			continue
		}
		seen[dir] = true
		dirs = append(dirs, dir)
	}
	return dirs, sc.Err()
}
