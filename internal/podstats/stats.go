package podstats

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/sandbox"
)

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

func cpuUsage(st *cgroups.Stats, rate uint64) *runtimeapi.CpuUsage {
	return &runtimeapi.CpuUsage{
		Timestamp:            st.Timestamp.UnixNano(),
		UsageCoreNanoSeconds: u64(st.CPU.UsageNanos),
		UsageNanoCores:       u64(rate),
	}
}

func memoryUsage(st *cgroups.Stats) *runtimeapi.MemoryUsage {
	return &runtimeapi.MemoryUsage{
		Timestamp:       st.Timestamp.UnixNano(),
		WorkingSetBytes: u64(st.Memory.WorkingSet),
		AvailableBytes:  u64(st.Memory.Available()),
		UsageBytes:      u64(st.Memory.Usage),
		RssBytes:        u64(st.Memory.RSS),
		PageFaults:      u64(st.Memory.PageFaults),
		MajorPageFaults: u64(st.Memory.MajorPageFaults),
	}
}

// containerSample reads a running container's statistics: from the
// runtime when it reports them (VM runtimes), else from its host cgroup.
func (c *Collector) containerSample(ctx context.Context, rec container.Record) (*cgroups.Stats, uint64, error) {
	if t := c.task(rec); t != nil {
		return c.rate(taskKey(rec.ID), func() (*cgroups.Stats, error) { return t.TaskStats(ctx, rec.ID) })
	}
	return c.sample(rec.CgroupPath)
}

// ContainerStats reads one container's statistics. A container whose
// cgroup is gone (it exited) reports attributes only.
func (c *Collector) ContainerStats(ctx context.Context, ctr *container.Container) (*runtimeapi.ContainerStats, error) {
	rec := ctr.Record()
	out := &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{
		Id:          rec.ID,
		Metadata:    &runtimeapi.ContainerMetadata{Name: rec.MetaName, Attempt: rec.Attempt},
		Labels:      rec.Labels,
		Annotations: rec.Annotations,
	}}
	if rec.State == container.StateRunning {
		st, rate, err := c.containerSample(ctx, rec)
		switch {
		case err == nil:
			out.Cpu = cpuUsage(st, rate)
			out.Memory = memoryUsage(st)
			addPSI(st, out.Cpu, out.Memory, &out.Io)
		case errdefs.IsNotFound(err):
		default:
			return nil, err
		}
	}
	if u, err := c.src.Rootfs.RootfsUsage(ctx, rec.ID); err == nil {
		out.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp:  time.Now().UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: c.src.StorageRoot},
			UsedBytes:  u64(u.UsedBytes),
			InodesUsed: u64(u.InodesUsed),
		}
	}
	return out, nil
}

// PodStats reads a pod's statistics: its own (CPU, memory, processes and,
// on a pod network, its interfaces) and its containers'.
func (c *Collector) PodStats(ctx context.Context, sb *sandbox.Sandbox) (*runtimeapi.PodSandboxStats, error) {
	return c.podStatsWith(ctx, sb, c.ContainerStats)
}

// podStatsWith is podStats with the pod's containers' statistics from
// ctrStats.
func (c *Collector) podStatsWith(ctx context.Context, sb *sandbox.Sandbox,
	ctrStats func(context.Context, *container.Container) (*runtimeapi.ContainerStats, error),
) (*runtimeapi.PodSandboxStats, error) {
	rec := sb.Record()
	linux := &runtimeapi.LinuxPodSandboxStats{}
	out := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id: rec.ID,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: rec.Metadata.Name, Namespace: rec.Metadata.Namespace,
				Uid: rec.Metadata.UID, Attempt: rec.Metadata.Attempt},
			Labels: rec.Labels, Annotations: rec.Annotations,
		},
		Linux: linux,
	}
	for _, ctr := range c.src.Containers.InSandbox(rec.ID) {
		cs, err := ctrStats(ctx, ctr)
		if err != nil {
			return nil, err
		}
		linux.Containers = append(linux.Containers, cs)
	}
	if rec.Phase != sandbox.PhaseReady {
		return out, nil
	}
	// The pod's own cgroup when the kubelet gave one (it holds the pause
	// and every container); else the sum of the pod's cgroups.
	paths := []string{c.src.SandboxCgroupDir(rec)}
	if pod := c.src.PodCgroupDir(rec); pod != "" {
		paths = []string{pod}
	} else {
		for _, ctr := range c.src.Containers.InSandbox(rec.ID) {
			if cr := ctr.Record(); cr.State == container.StateRunning {
				paths = append(paths, cr.CgroupPath)
			}
		}
	}
	var total cgroups.Stats
	var rate uint64
	var procs uint64
	for _, p := range paths {
		st, r, err := c.sample(p)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		total.Timestamp = st.Timestamp
		if len(paths) == 1 {
			// Neither pressure nor a limit is a sum: only of one cgroup
			// (the pod's own, whose limit the kubelet set).
			total.PSI = st.PSI
			total.Memory.Limit = st.Memory.Limit
		}
		total.CPU.UsageNanos += st.CPU.UsageNanos
		total.Memory.Usage += st.Memory.Usage
		total.Memory.WorkingSet += st.Memory.WorkingSet
		total.Memory.RSS += st.Memory.RSS
		total.Memory.PageFaults += st.Memory.PageFaults
		total.Memory.MajorPageFaults += st.Memory.MajorPageFaults
		procs += st.Pids.Current
		rate += r
	}
	if !total.Timestamp.IsZero() {
		linux.Cpu = cpuUsage(&total, rate)
		linux.Memory = memoryUsage(&total)
		addPSI(&total, linux.Cpu, linux.Memory, &linux.Io)
		linux.Process = &runtimeapi.ProcessUsage{Timestamp: total.Timestamp.UnixNano(), ProcessCount: u64(procs)}
	}
	if hasOwnNetwork(rec) {
		if n, err := networkUsage(rec); err == nil {
			linux.Network = n
		}
	}
	return out, nil
}
