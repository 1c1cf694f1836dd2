package server

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/systemd"
)

// The cgroup driver (cgroup_driver, resolved at start): where a pod's and a
// container's cgroups are, and what the runtimes are told.
//
// cgroupfs: a pod's cgroup parent is a path (/kubepods/burstable/pod<uid>),
// a container's cgroupsPath and cgroup <parent>/podbay-<id>, and the
// monitors (conmon, shims) live in <default_cgroup_parent>/conmon.
//
// systemd: a pod's cgroup parent is a slice (kubepods-burstable-pod<uid>.slice),
// a container's cgroupsPath <slice>:podbay:<id>, which runc and crun
// (--systemd-cgroup) make the scope podbay-<id>.scope in that slice, at
// the cgroupfs path systemd gives it (systemd.Layout.Dir); conmon and the
// shims each get a scope of their own in monitor_slice.

func (s *Server) cgLayout() systemd.Layout { return systemd.Layout{Systemd: s.cfg.SystemdCgroup()} }

// checkCgroupParent refuses, under the systemd driver, a pod cgroup parent
// that is not a slice, as containerd and CRI-O do.
func (s *Server) checkCgroupParent(parent string) error {
	if parent == "" || !s.cfg.SystemdCgroup() {
		return nil
	}
	if err := systemd.CheckSlice(parent); err != nil {
		return fmt.Errorf("linux.cgroup_parent under the systemd cgroup driver: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// cgroupSpecPath is the linux.cgroupsPath of container (or sandbox) id in
// the pod whose cgroup parent is parent.
func (s *Server) cgroupSpecPath(parent, id string) string { return s.cgLayout().SpecPath(parent, id) }

// cgroupDir is the cgroupfs path (relative to the hierarchies) of the
// cgroup of container (or sandbox) id in the pod whose parent is parent.
func (s *Server) cgroupDir(parent, id string) string { return s.cgLayout().Dir(parent, id) }

// sandboxCgroupDir is the cgroup of rec's sandbox container (the pause).
func (s *Server) sandboxCgroupDir(rec sandbox.Record) string {
	return s.cgroupDir(rec.CgroupParent, rec.ID)
}

// podCgroupDir is the cgroupfs path of rec's own pod cgroup (its cgroup
// parent, a slice expanded under systemd); "" when the pod runs under the
// daemon's default parent, which it shares with other pods.
func (s *Server) podCgroupDir(rec sandbox.Record) string {
	if rec.CgroupParent == "" || rec.CgroupParent == s.cfg.DefaultCgroupParent {
		return ""
	}
	return s.cgLayout().ParentDir(rec.CgroupParent)
}

// placeMonitor returns how the monitor of a create is placed under the
// systemd driver: conmon (oci handlers, one per container) in
// podbay-conmon-<id>.scope, the pod's shim (vm handlers, started with
// the sandbox container) in podbay-shim-<id>.scope, both in
// monitor_slice. nil under cgroupfs (MonitorCgroup is used).
func (s *Server) placeMonitor(handler, id string) func(context.Context, int) error {
	if !s.cfg.SystemdCgroup() || s.systemd == nil {
		return nil
	}
	traits := s.sandboxTraits(handler)
	kind, of := traits.Monitor(), "container"
	if traits.MonitorPerPod {
		of = "pod"
	}
	what := kind + " of " + of + " " + id
	unit := systemd.ScopePrefix + "-" + kind + "-" + id + ".scope"
	slice := s.cfg.MonitorSlice
	return func(ctx context.Context, pid int) error {
		return s.systemd.StartScope(ctx, unit, slice, pid, "podbay "+what)
	}
}

// runtimeCgroupDriver is the driver RuntimeConfig reports.
func (s *Server) runtimeCgroupDriver() runtimeapi.CgroupDriver {
	if s.cfg.SystemdCgroup() {
		return runtimeapi.CgroupDriver_SYSTEMD
	}
	return runtimeapi.CgroupDriver_CGROUPFS
}

// crunLeaf is the cgroup crun makes below a container's scope under the
// systemd driver on cgroup v2 (its run.oci.systemd.subgroup, "container"
// unless an annotation says otherwise): the container's processes run in
// it and crun sets the container's limits there, the scope holding only
// that leaf.
const crunLeaf = "container"

// runtimeLeafCgroup is the cgroup below dir the runtime put the container
// in, crun's leaf, or "" when the container runs in dir itself (runc).
// CRI-O looks for crun's leaf the same way.
func (s *Server) runtimeLeafCgroup(dir string) string {
	if !s.cfg.SystemdCgroup() || !s.host.CgroupV2 || dir == "" {
		return ""
	}
	leaf := path.Join(dir, crunLeaf)
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", leaf)); err != nil {
		return ""
	}
	return leaf
}

// containerParentCgroup is the parent cgroup of a container's own (its
// pod's): the parent of its scope, above crun's leaf.
func containerParentCgroup(cgroupPath string) string {
	return path.Dir(strings.TrimSuffix(cgroupPath, "/"+crunLeaf))
}

// keepIOWeight hands, under the systemd driver, an io.weight in a
// container's unified resources to its scope as well (systemd.SetIOWeight):
// the runtime writes it to the cgroup only, and systemd puts its own value
// back the next time it applies the scope's properties, as the runtime's
// update makes it do. A failure is logged: the weight the runtime wrote
// holds until then.
func (s *Server) keepIOWeight(ctx context.Context, id string, res *specs.LinuxResources) {
	if !s.cfg.SystemdCgroup() || s.systemd == nil || res == nil {
		return
	}
	v, ok := res.Unified["io.weight"]
	if !ok {
		return
	}
	w, err := systemd.ParseIOWeight(v)
	if err == nil {
		err = s.systemd.SetIOWeight(ctx, systemd.ScopeName(id), w)
	}
	if err != nil {
		log.G(ctx).Warn("io.weight not given to systemd: it lasts until systemd applies the scope's properties again", "err", err)
	}
}

// parentOOMKills is, under the systemd driver, the OOM kill count of the
// parent cgroup of rec's container (its pod's cgroup), read before the
// container starts for parentOOMKilled; nil under cgroupfs or when it
// cannot be read.
func (s *Server) parentOOMKills(rec container.Record) *uint64 {
	if !s.cfg.SystemdCgroup() || s.cgroups == nil || rec.CgroupPath == "" {
		return nil
	}
	n, err := s.cgroups.OOMKills(containerParentCgroup(rec.CgroupPath))
	if err != nil {
		return nil
	}
	return &n
}

// parentOOMKilled tells an OOM kill under the systemd driver that the
// container's own cgroup can no longer show: systemd removes a scope's
// cgroup as soon as its last process exits, often before conmon (or
// podbay) reads memory.events there (runc#5071, cri-o#7035; containerd
// skips critest's OOM spec under systemd for it). The parent cgroup, the
// pod's slice, counts its descendants' kills and outlives the scope: a
// container that died by SIGKILL without a stop from podbay, after that
// count grew past what it was when the container started, was OOM-killed.
// It is wrong only when another process under the same parent was
// OOM-killed meanwhile and this one was SIGKILLed by someone else.
func (s *Server) parentOOMKilled(c *container.Container, rec container.Record, code int32) bool {
	if rec.ParentOOMKills == nil || s.cgroups == nil || code != 128+int32(syscall.SIGKILL) || c.Stopping() {
		return false
	}
	n, err := s.cgroups.OOMKills(containerParentCgroup(rec.CgroupPath))
	return err == nil && n > *rec.ParentOOMKills
}

// scopeOOMKilled asks systemd, under the systemd driver, whether container
// id's scope ended in an OOM kill: systemd removes the scope's cgroup as
// soon as it empties, so memory.events may be gone before a shim or podbay
// reads it. Only an exit by SIGKILL is asked about; while the scope is
// still active (systemd has not handled the exit yet) it is asked again,
// for up to a second.
func (s *Server) scopeOOMKilled(ctx context.Context, id string, code int32) bool {
	if !s.cfg.SystemdCgroup() || s.systemd == nil || code != 128+int32(syscall.SIGKILL) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	unit := systemd.ScopeName(id)
	for i := 0; ; i++ {
		killed, settled, err := s.systemd.ScopeOOMKilled(ctx, unit)
		if err != nil {
			log.G(ctx).Debug("ask systemd about an OOM kill", "unit", unit, "err", err)
			return false
		}
		if killed || settled || i == 4 {
			return killed
		}
		time.Sleep(200 * time.Millisecond)
	}
}
