// Package cgroupdriver is the cgroup driver (cgroup_driver, resolved at
// start): where a pod's and a container's cgroups are, what the runtimes
// are told, where the monitors (conmon, shims) are placed, and how an OOM
// kill the container's own cgroup can no longer show is attributed.
//
// cgroupfs: a pod's cgroup parent is a path (/kubepods/burstable/pod<uid>),
// a container's cgroupsPath and cgroup <parent>/podbay-<id>, and the
// monitors live in <default_cgroup_parent>/conmon.
//
// systemd: a pod's cgroup parent is a slice (kubepods-burstable-pod<uid>.slice),
// a container's cgroupsPath <slice>:podbay:<id>, which runc and crun
// (--systemd-cgroup) make the scope podbay-<id>.scope in that slice, at
// the cgroupfs path systemd gives it (systemd.Layout.Dir); conmon and the
// shims each get a scope of their own in monitor_slice.
package cgroupdriver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/systemd"
)

// OOMCounter reads a cgroup's OOM kill count (internal/cgroups.Reader).
type OOMCounter interface {
	OOMKills(path string) (uint64, error)
}

// Config is what the driver is made of.
type Config struct {
	// Systemd selects the systemd driver; else cgroupfs.
	Systemd bool
	// DefaultParent is default_cgroup_parent: the pods' cgroup parent
	// when they name none, and under cgroupfs the monitors' ("conmon").
	DefaultParent string
	// MonitorSlice is where the monitors' scopes go under systemd.
	MonitorSlice string
	// CgroupV2: the host's cgroups are the unified hierarchy.
	CgroupV2 bool
	// Manager is the D-Bus connection of the systemd driver; nil under
	// cgroupfs (or when systemd could not be reached).
	Manager *systemd.Manager
	// OOM reads OOM kill counts; nil: none are read.
	OOM OOMCounter
}

// Driver places cgroups. Its methods are safe for concurrent use.
type Driver struct {
	cfg    Config
	layout systemd.Layout

	spawnOnce sync.Once
	spawner   *cgroups.Spawner // nil: the monitors are moved
}

// New returns the driver cfg describes.
func New(cfg Config) *Driver {
	return &Driver{cfg: cfg, layout: systemd.Layout{Systemd: cfg.Systemd}}
}

// Systemd says whether this is the systemd driver.
func (d *Driver) Systemd() bool { return d.cfg.Systemd }

// CheckParent refuses, under the systemd driver, a pod cgroup parent that
// is not a slice, as containerd and CRI-O do.
func (d *Driver) CheckParent(parent string) error {
	if parent == "" || !d.cfg.Systemd {
		return nil
	}
	if err := systemd.CheckSlice(parent); err != nil {
		return fmt.Errorf("linux.cgroup_parent under the systemd cgroup driver: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// SpecPath is the linux.cgroupsPath of container (or sandbox) id in the
// pod whose cgroup parent is parent.
func (d *Driver) SpecPath(parent, id string) string { return d.layout.SpecPath(parent, id) }

// Dir is the cgroupfs path (relative to the hierarchies) of the cgroup of
// container (or sandbox) id in the pod whose parent is parent.
func (d *Driver) Dir(parent, id string) string { return d.layout.Dir(parent, id) }

// PodDir is the cgroupfs path of a pod's own cgroup, its cgroup parent (a
// slice expanded under systemd); "" when the pod runs under the daemon's
// default parent, which it shares with other pods.
func (d *Driver) PodDir(parent string) string {
	if parent == "" || parent == d.cfg.DefaultParent {
		return ""
	}
	return d.layout.ParentDir(parent)
}

// crunLeaf is the cgroup crun makes below a container's scope under the
// systemd driver on cgroup v2 (its run.oci.systemd.subgroup, "container"
// unless an annotation says otherwise): the container's processes run in
// it and crun sets the container's limits there, the scope holding only
// that leaf.
const crunLeaf = "container"

// cgroupRoot is where the hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// LeafCgroup is the cgroup below dir the runtime put the container in,
// crun's leaf, or "" when the container runs in dir itself (runc). CRI-O
// looks for crun's leaf the same way.
func (d *Driver) LeafCgroup(dir string) string {
	if !d.cfg.Systemd || !d.cfg.CgroupV2 || dir == "" {
		return ""
	}
	leaf := path.Join(dir, crunLeaf)
	if _, err := os.Stat(filepath.Join(cgroupRoot, leaf)); err != nil {
		return ""
	}
	return leaf
}

// parentCgroup is the parent cgroup of a container's own (its pod's): the
// parent of its scope, above crun's leaf.
func parentCgroup(cgroupPath string) string {
	return path.Dir(strings.TrimSuffix(cgroupPath, "/"+crunLeaf))
}

// KeepIOWeight hands, under the systemd driver, an io.weight in a
// container's unified resources to its scope as well (systemd.SetIOWeight):
// the runtime writes it to the cgroup only, and systemd puts its own value
// back the next time it applies the scope's properties, as the runtime's
// update makes it do. A failure is logged: the weight the runtime wrote
// holds until then.
func (d *Driver) KeepIOWeight(ctx context.Context, id string, res *specs.LinuxResources) {
	if !d.cfg.Systemd || d.cfg.Manager == nil || res == nil {
		return
	}
	v, ok := res.Unified["io.weight"]
	if !ok {
		return
	}
	w, err := systemd.ParseIOWeight(v)
	if err == nil {
		err = d.cfg.Manager.SetIOWeight(ctx, systemd.ScopeName(id), w)
	}
	if err != nil {
		log.G(ctx).Warn("io.weight not given to systemd: it lasts until systemd applies the scope's properties again", "err", err)
	}
}

// Close releases the monitors' spawner; no spawner is made after it.
func (d *Driver) Close() {
	d.spawnOnce.Do(func() {})
	if d.spawner != nil {
		d.spawner.Close()
	}
}

// MonitorCgroup is where the per-container monitors live (conmon for oci
// handlers, the shim for vm handlers): out of the daemon's own cgroup, so
// a service manager stopping podbayd does not take the pods' monitors with
// it. The cgroup keeps its historical name, "conmon". Under the systemd
// driver the monitors get scopes instead (PlaceMonitor): "".
func (d *Driver) MonitorCgroup() string {
	if d.cfg.Systemd {
		return ""
	}
	return path.Join(d.cfg.DefaultParent, "conmon")
}

// SpawnMonitor returns runtime.CreateOptions.SpawnMonitor for the
// monitors' cgroup, or nil when they are placed otherwise (under the
// systemd driver, in scopes of their own): it starts the monitors born in
// MonitorCgroup (a cgroups.Spawner), so that no create waits for a
// monitor's move between cgroups. The spawner is made when a runtime first
// starts a monitor with it (not when options are built: a runtime that
// starts none, a fake's, leaves the host's cgroups alone); where it cannot
// be made, the monitors are moved as before (runtime.ErrMonitorNotSpawned).
func (d *Driver) SpawnMonitor(ctx context.Context) func(*exec.Cmd) error {
	cg := d.MonitorCgroup()
	if cg == "" {
		return nil
	}
	return func(cmd *exec.Cmd) error {
		d.spawnOnce.Do(func() {
			sp, err := cgroups.NewSpawner(cg)
			if err != nil {
				log.G(ctx).Warn("monitors will be moved into their cgroup after they start", "cgroup", cg, "err", err)
				return
			}
			d.spawner = sp
		})
		if d.spawner == nil {
			return runtime.ErrMonitorNotSpawned
		}
		return d.spawner.Start(cmd)
	}
}

// PlaceMonitor returns how the monitor of a create is placed under the
// systemd driver: conmon (oci handlers, one per container) in
// podbay-conmon-<id>.scope, the pod's shim (vm handlers, started with the
// sandbox container) in podbay-shim-<id>.scope, both in monitor_slice;
// kind is the monitor's name, perPod whether one serves the whole pod.
// nil under cgroupfs (MonitorCgroup is used).
func (d *Driver) PlaceMonitor(kind string, perPod bool, id string) func(context.Context, int) error {
	if !d.cfg.Systemd || d.cfg.Manager == nil {
		return nil
	}
	of := "container"
	if perPod {
		of = "pod"
	}
	what := kind + " of " + of + " " + id
	unit := systemd.ScopePrefix + "-" + kind + "-" + id + ".scope"
	slice, m := d.cfg.MonitorSlice, d.cfg.Manager
	return func(ctx context.Context, pid int) error {
		return m.StartScope(ctx, unit, slice, pid, "podbay "+what)
	}
}
