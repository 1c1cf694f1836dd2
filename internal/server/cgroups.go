package server

import (
	"context"
	"os/exec"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroupdriver"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/sandbox"
)

// Where the pods', containers' and monitors' cgroups are, and the OOM
// kills only their parents show: internal/cgroupdriver (s.cg), asked in
// the server's records' terms.

// newCgroupDriver is the driver of opts.
func newCgroupDriver(opts Options) *cgroupdriver.Driver {
	cfg := cgroupdriver.Config{
		Systemd:       opts.Config.SystemdCgroup(),
		DefaultParent: opts.Config.DefaultCgroupParent,
		MonitorSlice:  opts.Config.MonitorSlice,
		CgroupV2:      opts.Host.CgroupV2,
		Manager:       opts.Systemd,
	}
	if opts.Cgroups != nil { // a nil CgroupReader is no OOMCounter
		cfg.OOM = opts.Cgroups
	}
	return cgroupdriver.New(cfg)
}

// checkCgroupParent refuses a pod cgroup parent the driver cannot use.
func (s *Server) checkCgroupParent(parent string) error { return s.cg.CheckParent(parent) }

// cgroupSpecPath is the linux.cgroupsPath of container (or sandbox) id.
func (s *Server) cgroupSpecPath(parent, id string) string { return s.cg.SpecPath(parent, id) }

// cgroupDir is the cgroupfs path of container (or sandbox) id's cgroup.
func (s *Server) cgroupDir(parent, id string) string { return s.cg.Dir(parent, id) }

// sandboxCgroupDir is the cgroup of rec's sandbox container (the pause).
func (s *Server) sandboxCgroupDir(rec sandbox.Record) string {
	return s.cg.Dir(rec.CgroupParent, rec.ID)
}

// podCgroupDir is the cgroup of rec's own pod ("" under the default
// parent: cgroupdriver.Driver.PodDir).
func (s *Server) podCgroupDir(rec sandbox.Record) string { return s.cg.PodDir(rec.CgroupParent) }

// monitorCgroup is the monitors' cgroup, "" under systemd.
func (s *Server) monitorCgroup() string { return s.cg.MonitorCgroup() }

// spawnMonitor is runtime.CreateOptions.SpawnMonitor, nil under systemd.
func (s *Server) spawnMonitor(ctx context.Context) func(*exec.Cmd) error {
	return s.cg.SpawnMonitor(ctx)
}

// placeMonitor places the monitor of handler's kind of sandbox for
// container (or pod) id (cgroupdriver.Driver.PlaceMonitor).
func (s *Server) placeMonitor(handler, id string) func(context.Context, int) error {
	if !s.cg.Systemd() {
		return nil
	}
	traits := s.sandboxTraits(handler)
	return s.cg.PlaceMonitor(traits.Monitor(), traits.MonitorPerPod, id)
}

// runtimeLeafCgroup is crun's leaf below dir, or "".
func (s *Server) runtimeLeafCgroup(dir string) string { return s.cg.LeafCgroup(dir) }

// keepIOWeight hands an io.weight in res to container id's scope too.
func (s *Server) keepIOWeight(ctx context.Context, id string, res *specs.LinuxResources) {
	s.cg.KeepIOWeight(ctx, id, res)
}

// parentOOMKills is the OOM kill count of rec's pod cgroup under
// systemd, read before rec starts; nil otherwise.
func (s *Server) parentOOMKills(rec container.Record) *uint64 {
	return s.cg.ParentOOMKills(rec.CgroupPath)
}

// parentOOMKilled says whether c, which exited with code, was OOM-killed
// by its pod cgroup's count (under systemd).
func (s *Server) parentOOMKilled(c *container.Container, rec container.Record, code int32) bool {
	return s.cg.ParentOOMKilled(rec.ParentOOMKills, rec.CgroupPath, code, c.Stopping())
}

// scopeOOMKilled asks systemd whether container id's scope was OOM-killed.
func (s *Server) scopeOOMKilled(ctx context.Context, id string, code int32) bool {
	return s.cg.ScopeOOMKilled(ctx, id, code)
}

// runtimeCgroupDriver is the driver RuntimeConfig reports.
func (s *Server) runtimeCgroupDriver() runtimeapi.CgroupDriver {
	if s.cfg.SystemdCgroup() {
		return runtimeapi.CgroupDriver_SYSTEMD
	}
	return runtimeapi.CgroupDriver_CGROUPFS
}
