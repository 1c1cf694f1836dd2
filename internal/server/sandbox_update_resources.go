package server

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
	"github.com/podbay/podbay/internal/undo"
)

// UpdatePodSandboxResources applies a pod's new resource totals (in-place
// pod resize, KEP-1287). The kubelet sends it after resizing the pod's
// cgroup itself; podbay applies the values where they are enforced for
// the whole pod, so that a runtime driven without the kubelet's cgroup
// manager (or a VM runtime, which sizes its VM from them) follows too:
//
//   - the pod's own cgroup (its cgroup parent, when the kubelet gave one:
//     it holds the pause container and every container) gets the totals
//     plus the overhead: cpu shares, quota and period, memory limit,
//     hugepages, unified (v2);
//   - the sandbox container gets the totals, as at create: through runc
//     for oci handlers, through the shim's task Update with the
//     io.kubernetes.cri.sandbox-* annotations for vm handlers (Kata sizes
//     the VM from them);
//   - the stored pod request gets the new resources and overhead, so NRI
//     and a restarted daemon see them, and so does the stored
//     PodSandboxConfig that verbose PodSandboxStatus shows.
//
// NRI plugins are asked first (UpdatePodSandbox) and may refuse. A step
// that fails undoes the steps before it and the RPC fails: the kubelet
// treats the call as best effort, but a resize that did not happen must
// not look as if it did.
func (s *Server) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (_ *runtimeapi.UpdatePodSandboxResourcesResponse, retErr error) {
	sb, err := s.index.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	res, over := req.GetResources(), req.GetOverhead()
	if err := s.checkPodResources("resources", res); err != nil {
		return nil, err
	}
	if err := s.checkPodResources("overhead", over); err != nil {
		return nil, err
	}
	if res == nil && over == nil {
		return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
	}

	sb.OpMu.Lock()
	defer sb.OpMu.Unlock()
	if !s.index.Has(sb.ID) {
		return nil, fmt.Errorf("sandbox %s: %w", sb.ID, errdefs.ErrNotFound)
	}
	rec := sb.Record()
	ctl, podCgroup, err := s.resizable(rec)
	if err != nil {
		return nil, err
	}
	oldPod, newPod := resizedPod(rec.Request, res, over)

	if err := s.nri.UpdatePodSandbox(ctx, s.nriPod(rec), s.ociResources(podrequest.ResourcesOf(over)), s.ociResources(podrequest.ResourcesOf(res))); err != nil {
		return nil, err
	}

	cgroupStep := func(ctx context.Context) (func(context.Context) error, error) {
		if podCgroup == "" {
			return nil, nil
		}
		restore, err := s.cgroups.SetLimits(podCgroup, podLimits(newPod.Resources, newPod.Overhead))
		if err != nil {
			return nil, fmt.Errorf("update pod cgroup: %w", err)
		}
		return func(context.Context) error { return restore() }, nil
	}
	sandboxStep := func(ctx context.Context) (func(context.Context) error, error) {
		if res == nil {
			return nil, nil
		}
		return s.updateSandboxContainer(ctx, ctl, rec, res)
	}
	// The kernel keeps a v1 child's CFS quota within its parent's: when
	// the pod shrinks, the sandbox container's limit goes down first.
	steps := []func(context.Context) (func(context.Context) error, error){cgroupStep, sandboxStep}
	if shrinks(oldPod.Resources, res) {
		steps[0], steps[1] = sandboxStep, cgroupStep
	}
	for _, step := range steps {
		restore, err := step(ctx)
		if err != nil {
			return nil, err
		}
		if restore != nil {
			defer undo.OnError(ctx, &retErr, "restore pod resources", restore)
		}
	}

	if err := s.hit(ctx, "resize.persist"); err != nil {
		return nil, err
	}
	raw, err := resizedConfig(rec.Config, res, over)
	if err != nil {
		return nil, err
	}
	prev := rec
	rec = sb.Update(func(r *sandbox.Record) { r.Request, r.Config = &newPod, raw })
	if err := s.save(rec); err != nil {
		sb.Update(func(r *sandbox.Record) { r.Request, r.Config = prev.Request, prev.Config })
		return nil, err
	}
	if err := s.nri.PostUpdatePodSandbox(ctx, s.nriPod(rec)); err != nil {
		log.G(ctx).Warn("NRI PostUpdatePodSandbox", "err", err)
	}
	log.G(ctx).Info("pod resources updated", "cgroup", podCgroup)
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}

// resizable returns the controller and the cgroup of rec's pod (""
// for none of its own), which must be ready and resizable: it has a
// cgroup of its own, or its sandbox is sized by its update (a VM).
func (s *Server) resizable(rec sandbox.Record) (podsandbox.Controller, string, error) {
	if rec.Phase != sandbox.PhaseReady {
		return nil, "", fmt.Errorf("pod %s is %s, not ready: %w", rec.ID, rec.Phase, errdefs.ErrFailedPrecondition)
	}
	ctl, err := s.sandboxController(rec)
	if err != nil {
		return nil, "", err
	}
	podCgroup := s.podCgroup(rec)
	switch {
	case podCgroup == "" && !ctl.Traits().SizedByUpdate:
		return nil, "", fmt.Errorf("pod %s has no cgroup of its own (it was run without linux.cgroup_parent, so its containers share %s with other pods): %w",
			rec.ID, rec.CgroupParent, errdefs.ErrFailedPrecondition)
	case podCgroup != "" && s.cgroups == nil:
		return nil, "", fmt.Errorf("pod %s: cgroups are not available to this daemon: %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	return ctl, podCgroup, nil
}

// resizedPod is old (nil for a record without a request) with the new
// resources and overhead where the request sends them. The pod's request
// is shared with copies of the record: the resized pod is a new one.
func resizedPod(old *podrequest.Pod, res, over *runtimeapi.LinuxContainerResources) (oldPod *podrequest.Pod, newPod podrequest.Pod) {
	oldPod = old
	if oldPod == nil {
		oldPod = &podrequest.Pod{Version: podrequest.Version}
	}
	newPod = *oldPod
	if res != nil {
		newPod.Resources = podrequest.ResourcesOf(res)
	}
	if over != nil {
		newPod.Overhead = podrequest.ResourcesOf(over)
	}
	return oldPod, newPod
}

// podCgroup is the cgroup of rec's pod alone: its cgroup parent when the
// kubelet gave one, "" when the pod runs under the daemon's default
// parent, which it shares with other pods (the rule PodSandboxStats
// follows).
func (s *Server) podCgroup(rec sandbox.Record) string {
	return s.podCgroupDir(rec)
}

// checkPodResources refuses values the kernel would refuse, as
// CreateContainer does (specgen.CheckResources), and cgroup v2 settings
// on a v1 host.
func (s *Server) checkPodResources(what string, r *runtimeapi.LinuxContainerResources) error {
	if r == nil {
		return nil
	}
	if _, err := specgen.LinuxResources(podrequest.Resources(r), s.host); err != nil {
		return fmt.Errorf("pod %s: %w", what, err)
	}
	return nil
}

// podLimits are the pod cgroup's limits: the containers' totals plus the
// pod's overhead, as the kubelet sizes a pod cgroup. Zero is unset (the
// value in place stays); a negative quota or memory limit is no limit.
func podLimits(res, over *specgen.Resources) cgroups.Limits {
	var r, o specgen.Resources
	if res != nil {
		r = *res
	}
	if over != nil {
		o = *over
	}
	l := cgroups.Limits{CPUPeriod: r.CPUPeriod, Unified: r.Unified}
	if l.CPUPeriod == 0 {
		l.CPUPeriod = o.CPUPeriod
	}
	if r.CPUShares > 0 {
		l.CPUShares = r.CPUShares + o.CPUShares
	}
	l.CPUQuota = addLimit(r.CPUQuota, o.CPUQuota)
	l.MemoryLimit = addLimit(r.MemoryLimit, o.MemoryLimit)
	for size, limit := range r.HugepageLimits {
		if l.Hugepages == nil {
			l.Hugepages = map[string]uint64{}
		}
		l.Hugepages[size] += limit
	}
	for size, limit := range o.HugepageLimits {
		if _, ok := l.Hugepages[size]; ok {
			l.Hugepages[size] += limit
		}
	}
	return l
}

// addLimit adds an overhead to a limit: unset and unlimited stay so.
func addLimit(v, overhead int64) int64 {
	switch {
	case v > 0:
		return v + max(overhead, 0)
	case v < 0:
		return -1
	}
	return 0
}

// shrinks reports whether res lowers the CPU quota of old.
func shrinks(old *specgen.Resources, res *runtimeapi.LinuxContainerResources) bool {
	q := res.GetCpuQuota()
	var oldQuota int64
	if old != nil {
		oldQuota = old.CPUQuota
	}
	return q > 0 && (oldQuota <= 0 || q < oldQuota)
}

// resizedConfig is the stored PodSandboxConfig (what verbose
// PodSandboxStatus and pod checkpoints show of the kubelet's request)
// with the new resources and overhead. podbay acts on the pod's request,
// not on this copy.
func resizedConfig(raw []byte, res, over *runtimeapi.LinuxContainerResources) ([]byte, error) {
	cfg := &runtimeapi.PodSandboxConfig{}
	if len(raw) > 0 {
		if err := protojson.Unmarshal(raw, cfg); err != nil {
			return nil, fmt.Errorf("decode sandbox config: %w", err)
		}
	}
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
	}
	if res != nil {
		cfg.Linux.Resources = res
	}
	if over != nil {
		cfg.Linux.Overhead = over
	}
	out, err := protojson.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox config: %w", err)
	}
	return out, nil
}

// updateSandboxContainer gives the sandbox container the pod's new
// totals, as SandboxSpec gave them at create, and returns the undo that
// puts back the values its config.json held.
func (s *Server) updateSandboxContainer(ctx context.Context, ctl podsandbox.Controller, rec sandbox.Record, res *runtimeapi.LinuxContainerResources) (func(context.Context) error, error) {
	next := sandboxResources(res.GetCpuShares(), res.GetCpuQuota(), res.GetCpuPeriod(), res.GetMemoryLimitInBytes())
	if next.CPU == nil && next.Memory == nil {
		return nil, nil
	}
	spec, err := runtime.ReadSpec(rec.BundleDir())
	if err != nil {
		return nil, fmt.Errorf("read sandbox spec: %w", err)
	}
	restore, err := ctl.Update(ctx, podsandbox.UpdateRequest{
		ID:   rec.ID,
		Next: next,
		Prev: previousResources(spec, next),
		Totals: podsandbox.Totals{
			CPUPeriod: res.GetCpuPeriod(),
			CPUQuota:  res.GetCpuQuota(),
			CPUShares: res.GetCpuShares(),
			Memory:    res.GetMemoryLimitInBytes(),
		},
		Spec: spec,
	})
	if err != nil {
		return nil, fmt.Errorf("update sandbox container: %w", err)
	}
	return restore, nil
}

// sandboxResources are the sandbox container's limits for the pod's
// totals: the values set (a negative quota or memory limit is no limit).
func sandboxResources(shares, quota, period, memory int64) *specs.LinuxResources {
	out := &specs.LinuxResources{}
	if shares > 0 || quota != 0 || period > 0 {
		out.CPU = &specs.LinuxCPU{}
		if shares > 0 {
			v := uint64(shares)
			out.CPU.Shares = &v
		}
		if quota != 0 {
			v := max(quota, -1)
			out.CPU.Quota = &v
		}
		if period > 0 {
			v := uint64(period)
			out.CPU.Period = &v
		}
	}
	if memory != 0 {
		v := max(memory, -1)
		out.Memory = &specs.LinuxMemory{Limit: &v}
	}
	return out
}

// previousResources are the values of spec's resources that next
// changes; where spec had none, the kernel's defaults (no limit, 1024
// shares, a 100ms period).
func previousResources(spec *specs.Spec, next *specs.LinuxResources) *specs.LinuxResources {
	var cur specs.LinuxResources
	if spec.Linux != nil && spec.Linux.Resources != nil {
		cur = *spec.Linux.Resources
	}
	pick := func(p *int64, def int64) int64 {
		if p != nil {
			return *p
		}
		return def
	}
	pickU := func(p *uint64, def uint64) uint64 {
		if p != nil {
			return *p
		}
		return def
	}
	out := &specs.LinuxResources{}
	if next.CPU != nil {
		var c specs.LinuxCPU
		if cur.CPU != nil {
			c = *cur.CPU
		}
		out.CPU = &specs.LinuxCPU{}
		if next.CPU.Shares != nil {
			v := pickU(c.Shares, 1024)
			out.CPU.Shares = &v
		}
		if next.CPU.Quota != nil {
			v := pick(c.Quota, -1)
			out.CPU.Quota = &v
		}
		if next.CPU.Period != nil {
			v := pickU(c.Period, 100000)
			out.CPU.Period = &v
		}
	}
	if next.Memory != nil {
		var limit *int64
		if cur.Memory != nil {
			limit = cur.Memory.Limit
		}
		v := pick(limit, -1)
		out.Memory = &specs.LinuxMemory{Limit: &v}
	}
	return out
}
