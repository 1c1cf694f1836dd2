// Package cgroups reads the resource usage of the cgroups podbay's
// containers and sandboxes run in: the numbers the CRI's ContainerStats and
// PodSandboxStats report, and the kernel's OOM-kill counter.
//
// podbay uses the cgroupfs driver, so a cgroup is named by a path such as
// /kubepods/pod123/podbay-<id>, relative to the root of each hierarchy. The
// host's layout is detected once, by New:
//
//   - V2 (unified): one hierarchy at the root, which holds cgroup.controllers.
//   - V1: one hierarchy per controller at <root>/<controller> (or a
//     co-mounted <root>/cpu,cpuacct). A hybrid host, whose cgroup2 mount at
//     <root>/unified carries no controller this package reads, is V1.
//
// Reading is most of the package; creating and joining a container's
// cgroups is the OCI runtime's job. The writers in hierarchy.go place a
// runtime's monitor process in a cgroup and remove a container cgroup its
// runtime lost track of; SetLimits (limits.go) resizes a pod's cgroup.
package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// DefaultRoot is where Linux mounts the cgroup hierarchies.
const DefaultRoot = "/sys/fs/cgroup"

// Mode is a host's cgroup layout.
type Mode int

// Layouts.
const (
	// V1 is one hierarchy per controller, including the hybrid layout.
	V1 Mode = iota + 1
	// V2 is the unified hierarchy.
	V2
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// v1 controllers this package reads.
const (
	ctrlCPU     = "cpu"
	ctrlCPUAcct = "cpuacct"
	ctrlMemory  = "memory"
	ctrlPids    = "pids"
	ctrlBlkio   = "blkio"
)

// Reader reads cgroups under one root. It is immutable after New and safe
// for concurrent use.
type Reader struct {
	mode Mode
	root string
	// v1 maps a v1 controller to the root of its hierarchy; controllers
	// that are not mounted are absent.
	v1 map[string]string
	// unified is a v1 host's hybrid cgroup2 mount, "" if none; only
	// pressure files are read there.
	unified string
}

// New detects the cgroup layout under root (DefaultRoot on a real host; a
// fake tree in tests). A v1 host must have the cpuacct or the memory
// hierarchy mounted.
func New(root string) (*Reader, error) {
	if exists(filepath.Join(root, "cgroup.controllers")) {
		return &Reader{mode: V2, root: root}, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("detect cgroup layout: %w", err)
	}
	v1 := make(map[string]string)
	for _, ctrl := range []string{ctrlCPU, ctrlCPUAcct, ctrlMemory, ctrlPids, ctrlBlkio} {
		if dir, ok := findV1Hierarchy(root, entries, ctrl); ok {
			v1[ctrl] = dir
		}
	}
	if v1[ctrlCPUAcct] == "" && v1[ctrlMemory] == "" {
		return nil, fmt.Errorf("detect cgroup layout: no cgroup2 mount and no cpuacct or memory hierarchy at %s", root)
	}
	r := &Reader{mode: V1, root: root, v1: v1}
	if dir := filepath.Join(root, "unified"); exists(filepath.Join(dir, "cgroup.controllers")) {
		r.unified = dir
	}
	return r, nil
}

// findV1Hierarchy returns the directory of ctrl's v1 hierarchy: <root>/ctrl
// (a symlink on hosts that co-mount controllers), or else a co-mount named
// for several controllers such as "cpu,cpuacct". A directory that holds no
// cgroup.procs is an empty mount point, not a hierarchy.
func findV1Hierarchy(root string, entries []fs.DirEntry, ctrl string) (string, bool) {
	candidates := []string{ctrl}
	for _, e := range entries {
		name := e.Name()
		if strings.Contains(name, ",") {
			for c := range strings.SplitSeq(name, ",") {
				if c == ctrl {
					candidates = append(candidates, name)
				}
			}
		}
	}
	for _, name := range candidates {
		dir := filepath.Join(root, name)
		if exists(filepath.Join(dir, "cgroup.procs")) {
			return dir, true
		}
	}
	return "", false
}

// Mode returns the layout New detected.
func (r *Reader) Mode() Mode { return r.mode }

// Procs returns the pids of the processes in the cgroup at path (its
// cgroup.procs; on v1, of the pids hierarchy or the first other one
// mounted). A missing cgroup is an error wrapping errdefs.ErrNotFound.
func (r *Reader) Procs(path string) ([]int, error) {
	rel, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.root, rel)
	if r.mode == V1 {
		for _, ctrl := range []string{ctrlPids, ctrlMemory, ctrlCPUAcct, ctrlCPU} {
			if root, ok := r.v1[ctrl]; ok {
				dir = filepath.Join(root, rel)
				break
			}
		}
	}
	b, err := readFile(dir, "cgroup.procs")
	if err != nil {
		return nil, fmt.Errorf("list processes of cgroup %s: %w", path, err)
	}
	pids, err := parsePids(b)
	if err != nil {
		return nil, fmt.Errorf("list processes of cgroup %s: %w", path, err)
	}
	return pids, nil
}

// OOMKills returns how many processes the kernel OOM killer has killed in
// the cgroup at path: memory.events oom_kill on v2 (counting descendant
// cgroups too), memory.oom_control oom_kill on v1 (kernel 4.13 and later).
// Where the kernel keeps no such counter, or the memory controller is not
// enabled for the cgroup, it returns 0. Callers use it for the
// "OOMKilled" reason when conmon left no marker, so it must run before the
// cgroup is removed: a missing cgroup is an error wrapping
// errdefs.ErrNotFound.
func (r *Reader) OOMKills(path string) (uint64, error) {
	rel, err := cleanPath(path)
	if err != nil {
		return 0, err
	}
	var n uint64
	if r.mode == V2 {
		n, err = oomKillsV2(filepath.Join(r.root, rel))
	} else {
		root, ok := r.v1[ctrlMemory]
		if !ok {
			return 0, nil
		}
		n, err = oomKillsV1(filepath.Join(root, rel))
	}
	if err != nil {
		return 0, fmt.Errorf("read OOM kills of cgroup %s: %w", path, err)
	}
	return n, nil
}

// cleanPath turns a cgroupfs path into a clean absolute path that cannot
// climb out of a hierarchy's root. The empty path is rejected: a caller that
// means the root cgroup says "/".
func cleanPath(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("empty cgroup path: %w", errdefs.ErrInvalidArgument)
	}
	return filepath.Clean("/" + path), nil
}

// readFile reads the file name of the cgroup directory dir. When the file is
// missing because the cgroup itself is gone (never created, or removed
// under us: a removed cgroup's files vanish with it, and reads of an open
// one fail with ENODEV), the error wraps errdefs.ErrNotFound; a file missing
// from a cgroup that exists wraps fs.ErrNotExist, which optional files
// tolerate.
func readFile(dir, name string) ([]byte, error) {
	b, err := readControl(filepath.Join(dir, name))
	if err == nil {
		return b, nil
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		if !exists(dir) {
			return nil, errdefs.ErrNotFound
		}
	}
	return nil, err
}

// readOptional is readFile for a file whose absence (an older kernel, a
// controller not enabled) is not an error: it returns nil, nil then.
func readOptional(dir, name string) ([]byte, error) {
	b, err := readFile(dir, name)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// requireDir fails with errdefs.ErrNotFound if the cgroup dir is missing.
func requireDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.ErrNotFound
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a cgroup directory", dir)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parsePids parses cgroup.procs: one pid a line.
func parsePids(b []byte) ([]int, error) {
	var pids []int
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		pid, err := strconv.Atoi(string(line))
		if err != nil {
			return nil, fmt.Errorf("parse cgroup.procs: %w", err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
