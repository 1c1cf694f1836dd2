package oci

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	dir    string // mount point
	cpuset bool   // a v1 hierarchy with the cpuset controller
}

// MoveToCgroup moves pid into the cgroup at path (relative to each
// hierarchy's root) in every mounted cgroup hierarchy, v1 and v2, creating
// directories where missing. New v1 cpuset cgroups get their parent's
// cpus and mems, without which no process may join them.
func MoveToCgroup(pid int, path string) error {
	rel := filepath.Clean("/" + path)
	if rel == "/" {
		return fmt.Errorf("cgroup path %q names the root", path)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	mounts, err := parseCgroupMounts(f)
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return errors.New("no cgroup hierarchy mounted")
	}
	for _, m := range mounts {
		dir := m.dir
		for elem := range strings.SplitSeq(strings.TrimPrefix(rel, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, elem)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			if m.cpuset {
				if err := inheritCpuset(parent, dir); err != nil {
					return err
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return err
		}
	}
	return nil
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

// parseCgroupMounts returns the cgroup and cgroup2 mounts in a
// /proc/<pid>/mountinfo, one per mount point.
func parseCgroupMounts(r io.Reader) ([]cgroupMount, error) {
	var mounts []cgroupMount
	seen := make(map[string]bool)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// 36 35 0:31 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 1 {
			continue
		}
		fstype, dir := tail[0], unescapeMountinfo(fields[4])
		if (fstype != "cgroup" && fstype != "cgroup2") || seen[dir] {
			continue
		}
		seen[dir] = true
		m := cgroupMount{dir: dir}
		if fstype == "cgroup" && len(tail) >= 3 {
			for opt := range strings.SplitSeq(tail[2], ",") {
				if opt == "cpuset" {
					m.cpuset = true
				}
			}
		}
		mounts = append(mounts, m)
	}
	return mounts, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for a space…) that
// mountinfo uses in paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
