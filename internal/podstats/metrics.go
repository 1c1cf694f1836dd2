package podstats

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
)

// metricsSampleMaxAge is how old a cached cgroup or task sample may be
// and still serve ListPodSandboxMetrics: the kubelet scrapes its
// /metrics/cadvisor endpoint and PodSandboxStats at about the same time,
// and one read of a pod's files serves both.
const metricsSampleMaxAge = 2 * time.Second

// metricSample returns the sample cached under key if it is recent,
// else reads a new one (which the next ContainerStats or PodSandboxStats
// then uses for its CPU rate).
func (c *Collector) metricSample(key string, read func() (*cgroups.Stats, error)) (*cgroups.Stats, error) {
	c.prev.mu.Lock()
	prev := c.prev.prev[key]
	c.prev.mu.Unlock()
	if prev != nil && time.Since(prev.Timestamp) < metricsSampleMaxAge {
		return prev, nil
	}
	st, _, err := c.rate(key, read)
	return st, err
}

// metricSet collects the metrics of one pod or container.
type metricSet struct {
	base []string // values of metricBaseLabels
	ts   int64
	out  []*runtimeapi.Metric
}

func newMetricSet(ts time.Time, base ...string) *metricSet {
	return &metricSet{base: base, ts: ts.UnixNano()}
}

// add appends metric k with value v; labels are the values of the
// metric's own label keys.
func (m *metricSet) add(k metricKey, v uint64, labels ...string) {
	def := &metricDefs[k]
	values := make([]string, 0, len(m.base)+len(labels))
	values = append(append(values, m.base...), labels...)
	m.out = append(m.out, &runtimeapi.Metric{
		Name:        def.name,
		Timestamp:   m.ts,
		MetricType:  def.typ,
		Value:       &runtimeapi.UInt64Value{Value: v},
		LabelValues: values,
	})
}

// at returns a set with the same labels and timestamp t.
func (m *metricSet) at(t time.Time) *metricSet {
	return &metricSet{base: m.base, ts: t.UnixNano(), out: m.out}
}

func seconds(nanos uint64) uint64 { return nanos / uint64(time.Second) }

// addCgroup adds the CPU, memory, process-count and pressure metrics of a
// sample. hierarchyOnly: the sample is of a cgroup with children (a pod),
// whose counters are the hierarchy's, not its own. The CFS counters are
// sent where a CPU quota is set (quota: the container's spec says so, as
// cAdvisor decides) or periods elapsed, zeros included.
func (m *metricSet) addCgroup(st *cgroups.Stats, hierarchyOnly, quota bool) {
	m.add(mCPUUsage, seconds(st.CPU.UsageNanos), "total")
	m.add(mCPUUser, seconds(st.CPU.UserNanos))
	m.add(mCPUSystem, seconds(st.CPU.SystemNanos))
	if quota || st.CPU.Periods > 0 {
		m.add(mCPUCFSPeriods, st.CPU.Periods)
		m.add(mCPUCFSThrottledPeriods, st.CPU.ThrottledPeriods)
		m.add(mCPUCFSThrottledSeconds, seconds(st.CPU.ThrottledNanos))
	}

	mem, d := st.Memory, st.MemoryDetail
	m.add(mMemoryCache, mem.Cache)
	m.add(mMemoryRSS, mem.RSS)
	m.add(mMemoryKernel, d.KernelUsage)
	m.add(mMemoryMappedFile, d.MappedFile)
	m.add(mMemorySwap, mem.Swap)
	m.add(mMemoryFailcnt, d.Failcnt)
	m.add(mMemoryUsage, mem.Usage)
	m.add(mMemoryMaxUsage, d.MaxUsage)
	m.add(mMemoryWorkingSet, mem.WorkingSet)
	m.add(mMemoryActiveFile, d.ActiveFile)
	m.add(mMemoryInactiveFile, d.InactiveFile)
	for _, f := range []struct {
		kind string
		v    uint64
	}{{"pgfault", mem.PageFaults}, {"pgmajfault", mem.MajorPageFaults}} {
		// A container's cgroup has no children: its own counts are
		// its hierarchy's.
		if !hierarchyOnly {
			m.add(mMemoryFailures, f.v, f.kind, "container")
		}
		m.add(mMemoryFailures, f.v, f.kind, "hierarchy")
	}
	m.add(mOOMEvents, mem.OOMKills)

	m.add(mThreads, st.Pids.Current)
	m.add(mThreadsMax, st.Pids.Limit)

	if p := st.PSI; p != nil {
		for _, r := range []struct {
			t                *cgroups.PSIResource
			stalled, waiting metricKey
		}{
			{p.CPU, mPressureCPUStalled, mPressureCPUWaiting},
			{p.Memory, mPressureMemoryStalled, mPressureMemoryWaiting},
			{p.IO, mPressureIOStalled, mPressureIOWaiting},
		} {
			if r.t == nil {
				continue
			}
			m.add(r.stalled, r.t.Full.TotalNanos/1e9)
			m.add(r.waiting, r.t.Some.TotalNanos/1e9)
		}
	}
}

// addNetwork adds the counters of each interface.
func (m *metricSet) addNetwork(devs []procfs.NetDev) {
	for _, d := range devs {
		m.add(mNetRxBytes, d.RxBytes, d.Name)
		m.add(mNetRxPackets, d.RxPackets, d.Name)
		m.add(mNetRxDropped, d.RxDropped, d.Name)
		m.add(mNetRxErrors, d.RxErrors, d.Name)
		m.add(mNetTxBytes, d.TxBytes, d.Name)
		m.add(mNetTxPackets, d.TxPackets, d.Name)
		m.add(mNetTxDropped, d.TxDropped, d.Name)
		m.add(mNetTxErrors, d.TxErrors, d.Name)
	}
}

// addSpec adds the limits of the container's OCI spec (updated by
// UpdateContainerResources) and the soft open-files limit of its process.
func (m *metricSet) addSpec(spec *specs.Spec) {
	if spec == nil {
		return
	}
	if spec.Linux != nil && spec.Linux.Resources != nil {
		r := spec.Linux.Resources
		var period, shares uint64
		var quota int64
		if c := r.CPU; c != nil {
			period, shares = deref(c.Period), deref(c.Shares)
			quota = deref(c.Quota)
		}
		m.add(mSpecCPUPeriod, period)
		m.add(mSpecCPUShares, shares)
		if quota > 0 {
			m.add(mSpecCPUQuota, uint64(quota))
		}
		var limit, reservation, swap int64
		if mem := r.Memory; mem != nil {
			limit, reservation, swap = deref(mem.Limit), deref(mem.Reservation), deref(mem.Swap)
		}
		m.add(mSpecMemoryLimit, positive(limit))
		m.add(mSpecMemoryReservation, positive(reservation))
		m.add(mSpecMemorySwapLimit, positive(swap))
	}
	if spec.Process != nil {
		for _, rl := range spec.Process.Rlimits {
			if rl.Type == "RLIMIT_NOFILE" && rl.Soft != unix.RLIM_INFINITY {
				m.add(mUlimitsSoft, rl.Soft, "max_open_files")
			}
		}
	}
}

// hasCPUQuota reports whether spec sets a CPU quota (CFS bandwidth).
func hasCPUQuota(spec *specs.Spec) bool {
	if spec == nil || spec.Linux == nil || spec.Linux.Resources == nil || spec.Linux.Resources.CPU == nil {
		return false
	}
	return deref(spec.Linux.Resources.CPU.Quota) > 0
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// positive is a spec limit as cAdvisor reports it: 0 when unlimited (-1
// or unset).
func positive(v int64) uint64 {
	if v <= 0 {
		return 0
	}
	return uint64(v)
}

// fsStat is the filesystem holding the image store's container layers,
// named by the store's root (as ContainerStats names it); ok is false when
// statfs failed.
type fsStat struct {
	device                         string
	limit, inodesTotal, inodesFree uint64
	ok                             bool
}

func (c *Collector) storageFs() fsStat {
	root := c.src.StorageRoot
	var st unix.Statfs_t
	if root == "" || unix.Statfs(root, &st) != nil {
		return fsStat{device: root}
	}
	return fsStat{
		device:      root,
		limit:       st.Blocks * uint64(st.Bsize),
		inodesTotal: st.Files,
		inodesFree:  st.Ffree,
		ok:          true,
	}
}

// PodMetrics gathers the metrics (see metricDefs) of every ready pod: the
// pod's own (its cgroup and network interfaces) and one entry per running
// container. A pod or container that cannot be read is left out and
// logged, as containerd does, so that one broken pod does not hide the
// node's metrics; an error is ctx's only.
func (c *Collector) PodMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	fs := c.storageFs()
	var out []*runtimeapi.PodSandboxMetrics
	bundles := map[string]bool{}
	for _, sb := range c.src.Sandboxes.List() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if sb.Record().Phase != sandbox.PhaseReady {
			continue
		}
		pm := c.podMetrics(ctx, sb, fs)
		out = append(out, pm)
		for _, cm := range pm.ContainerMetrics {
			if ctr, err := c.src.Containers.Get(cm.ContainerId); err == nil {
				bundles[ctr.Record().BundleDir()] = true
			}
		}
	}
	c.src.Specs.Retain(bundles)
	return out, nil
}

// podMetrics gathers the metrics of one ready pod and its running
// containers. A pod or container that goes away meanwhile is left out.
func (c *Collector) podMetrics(ctx context.Context, sb *sandbox.Sandbox, fs fsStat) *runtimeapi.PodSandboxMetrics {
	rec := sb.Record()
	out := &runtimeapi.PodSandboxMetrics{PodSandboxId: rec.ID}
	name, ns := rec.Metadata.Name, rec.Metadata.Namespace
	pod := newMetricSet(time.Now(), name, ns, "", rec.ID, "")

	if st, hierarchy, ok := c.podSample(ctx, rec); ok {
		pod = pod.at(st.Timestamp)
		pod.addCgroup(st, hierarchy, false)
		pod.addIO(st.IO, c.devs.name)
	}
	if hasOwnNetwork(rec) {
		if devs, err := podNetDev(rec); err == nil {
			pod = pod.at(time.Now())
			pod.addNetwork(devs)
		} else {
			log.G(ctx).Debug("pod network metrics", "pod", rec.ID, "err", err)
		}
	}
	out.Metrics = pod.out

	for _, ctr := range c.src.Containers.InSandbox(rec.ID) {
		if cm := c.containerMetrics(ctx, ctr, name, ns, fs); cm != nil {
			out.ContainerMetrics = append(out.ContainerMetrics, cm)
		}
	}
	return out
}

// podSample reads the pod's cgroup: the one the kubelet gave, which holds
// every container (hierarchy true), or else the sum of the pause's and the
// containers' cgroups, as PodSandboxStats does.
func (c *Collector) podSample(ctx context.Context, rec sandbox.Record) (st *cgroups.Stats, hierarchy, ok bool) {
	if c.src.Cgroups == nil {
		return nil, false, false
	}
	if pod := c.src.PodCgroupDir(rec); pod != "" {
		st, err := c.metricSample(pod, func() (*cgroups.Stats, error) { return c.src.Cgroups.Stats(pod) })
		if err != nil {
			log.G(ctx).Debug("pod cgroup metrics", "pod", rec.ID, "err", err)
			return nil, false, false
		}
		return st, true, true
	}
	paths := []string{c.src.SandboxCgroupDir(rec)}
	for _, ctr := range c.src.Containers.InSandbox(rec.ID) {
		if cr := ctr.Record(); cr.State == container.StateRunning {
			paths = append(paths, cr.CgroupPath)
		}
	}
	var total cgroups.Stats
	for _, p := range paths {
		one, err := c.metricSample(p, func() (*cgroups.Stats, error) { return c.src.Cgroups.Stats(p) })
		if err != nil {
			continue
		}
		addStats(&total, one)
	}
	return &total, true, !total.Timestamp.IsZero()
}

// addStats adds b's counters and gauges to a; limits and pressure, which
// do not add up, are left out.
func addStats(a, b *cgroups.Stats) {
	if b.Timestamp.After(a.Timestamp) {
		a.Timestamp = b.Timestamp
	}
	a.CPU.UsageNanos += b.CPU.UsageNanos
	a.CPU.UserNanos += b.CPU.UserNanos
	a.CPU.SystemNanos += b.CPU.SystemNanos
	a.Memory.Usage += b.Memory.Usage
	a.Memory.WorkingSet += b.Memory.WorkingSet
	a.Memory.RSS += b.Memory.RSS
	a.Memory.Cache += b.Memory.Cache
	a.Memory.Swap += b.Memory.Swap
	a.Memory.PageFaults += b.Memory.PageFaults
	a.Memory.MajorPageFaults += b.Memory.MajorPageFaults
	a.Memory.OOMKills += b.Memory.OOMKills
	a.MemoryDetail.MappedFile += b.MemoryDetail.MappedFile
	a.MemoryDetail.ActiveFile += b.MemoryDetail.ActiveFile
	a.MemoryDetail.InactiveFile += b.MemoryDetail.InactiveFile
	a.MemoryDetail.KernelUsage += b.MemoryDetail.KernelUsage
	a.MemoryDetail.Failcnt += b.MemoryDetail.Failcnt
	a.Pids.Current += b.Pids.Current
	a.IO = cgroups.AddIO(a.IO, b.IO)
}

// containerMetrics gathers a running container's metrics; nil for one
// that is not running or went away.
func (c *Collector) containerMetrics(ctx context.Context, ctr *container.Container, pod, ns string, fs fsStat) *runtimeapi.ContainerMetrics {
	rec := ctr.Record()
	if rec.State != container.StateRunning {
		return nil
	}
	now := time.Now()
	m := newMetricSet(now, pod, ns, rec.MetaName, rec.ID, rec.ImageRef)
	m.add(mLastSeen, uint64(now.Unix()))
	if !rec.StartedAt.IsZero() {
		m.add(mStartTime, uint64(rec.StartedAt.Unix()))
	}

	spec := c.src.Specs.Get(rec.BundleDir())
	task := c.task(rec)
	var st *cgroups.Stats
	var err error
	if task != nil {
		st, err = c.metricSample(taskKey(rec.ID), func() (*cgroups.Stats, error) { return task.TaskStats(ctx, rec.ID) })
	} else if c.src.Cgroups != nil {
		st, err = c.metricSample(rec.CgroupPath, func() (*cgroups.Stats, error) { return c.src.Cgroups.Stats(rec.CgroupPath) })
	}
	switch {
	case err != nil && errdefs.IsNotFound(err):
		return nil
	case err != nil:
		log.G(ctx).Warn("container metrics", "container", rec.ID, "err", err)
	case st != nil:
		m = m.at(st.Timestamp)
		m.addCgroup(st, false, hasCPUQuota(spec))
		m.addIO(st.IO, c.devs.name)
	}

	m = m.at(time.Now())
	c.addProcesses(ctx, m, task, rec)
	if u, err := c.src.Rootfs.RootfsUsage(ctx, rec.ID); err == nil {
		m.add(mFsUsage, u.UsedBytes, fs.device)
		if fs.ok {
			m.add(mFsLimit, fs.limit, fs.device)
			m.add(mFsInodesTotal, fs.inodesTotal, fs.device)
			m.add(mFsInodesFree, fs.inodesFree, fs.device)
		}
	}
	m.addSpec(spec)
	return &runtimeapi.ContainerMetrics{ContainerId: rec.ID, Metrics: m.out}
}

// addProcesses adds the process count and the open file descriptors and
// sockets of the processes in the container's host cgroup, as cAdvisor
// counts them. vm handlers report the processes the shim lists (inside
// the VM for Kata); their descriptors are counted where the container has
// a host cgroup (containerd-shim-runc-v2's containers do; its cgroup.procs
// lists host processes only, so a PID inside a VM is never read), and are
// absent where it has none.
func (c *Collector) addProcesses(ctx context.Context, m *metricSet, task runtime.TaskReporter, rec container.Record) {
	if task != nil {
		if pids, err := task.TaskPids(ctx, rec.ID); err == nil {
			m.add(mProcesses, uint64(len(pids)))
		}
	}
	if c.src.Cgroups == nil {
		return
	}
	pids, err := c.src.Cgroups.Procs(rec.CgroupPath)
	if err != nil {
		return
	}
	if task == nil {
		m.add(mProcesses, uint64(len(pids)))
	}
	fds, sockets := countFDs(pids)
	m.add(mFileDescriptors, fds)
	m.add(mSockets, sockets)
}

// countFDs counts the open descriptors of pids, and those that are
// sockets, from /proc (no process is started). A process that exits
// meanwhile counts 0.
func countFDs(pids []int) (fds, sockets uint64) {
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		fds += uint64(len(entries))
		for _, e := range entries {
			if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:") {
				sockets++
			}
		}
	}
	return fds, sockets
}
