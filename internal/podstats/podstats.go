// Package podstats owns the resource statistics and metrics podbay reports
// for its pods and containers: the CRI stats of ContainerStats and
// PodSandboxStats (with the background samples their List forms are
// answered from, stats_collect_period) and the cAdvisor-style metrics of
// ListPodSandboxMetrics with their descriptors. It reads cgroup files,
// /proc and the runtimes' own task statistics, and starts no process. It
// knows the pods and containers only through the indexes and functions its
// Sources give; the RPC handlers that ask for the statistics stay in
// internal/server.
package podstats

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
)

// Cgroups reads the statistics and the processes of a cgroup, by its
// cgroupfs path; internal/cgroups.Reader implements it.
type Cgroups interface {
	Stats(path string) (*cgroups.Stats, error)
	Procs(path string) ([]int, error)
}

// Rootfs reports the usage of a container's writable layer; the image
// store implements it.
type Rootfs interface {
	RootfsUsage(ctx context.Context, id string) (image.FsUsage, error)
}

// Sources are what the statistics are read from and about.
type Sources struct {
	// Cgroups reads the host cgroups; nil: no cgroup statistics (a
	// container's stats then carry its attributes and writable layer).
	Cgroups Cgroups
	// Sandboxes and Containers are the published pods and containers.
	Sandboxes  *sandbox.Index
	Containers *container.Index
	// TaskOf is the runtime of rec's handler when it reports the
	// container's statistics and processes itself (vm handlers); nil (or
	// a nil TaskOf): they are read from its host cgroup.
	TaskOf func(rec container.Record) runtime.TaskReporter
	// Rootfs reports the writable layers, on the filesystem of the image
	// store's StorageRoot.
	Rootfs      Rootfs
	StorageRoot string
	// SandboxCgroupDir is the cgroupfs path of a pod's sandbox (pause)
	// cgroup; PodCgroupDir that of the pod's own cgroup, "" when the pod
	// has none (it runs under the daemon's default parent).
	SandboxCgroupDir func(sandbox.Record) string
	PodCgroupDir     func(sandbox.Record) string
	// Specs caches the bundles' specs (the metrics read their limits);
	// shared with the server's ContainerStatus. Required.
	Specs *runtime.SpecCache
	// Period is the background sampling period (stats_collect_period);
	// 0: none, every List reads afresh.
	Period time.Duration
}

// Collector reads and keeps the statistics. It is safe for concurrent
// use.
type Collector struct {
	src     Sources
	prev    rates        // the previous sample of each cgroup or task, for CPU rates
	samples statsSamples // the background samples (samples.go)
	devs    devNames     // block device names, for the I/O metrics
}

// New returns a collector over src.
func New(src Sources) *Collector {
	return &Collector{src: src, devs: devNames{dir: sysDevBlock}}
}

// rates keeps each cgroup's (or runtime task's) previous sample, for CPU
// rates.
type rates struct {
	mu   sync.Mutex
	prev map[string]*cgroups.Stats // by cgroup path, or "task:"+ID; guarded by mu
}

// Forget drops what is kept of container rec: its previous samples, for
// a container that exited (a new start begins its CPU rate afresh).
func (c *Collector) Forget(rec container.Record) {
	c.prev.mu.Lock()
	defer c.prev.mu.Unlock()
	delete(c.prev.prev, rec.CgroupPath)
	delete(c.prev.prev, taskKey(rec.ID))
}

func taskKey(id string) string { return "task:" + id }

// task is rec's runtime when it reports rec's statistics itself, else nil.
func (c *Collector) task(rec container.Record) runtime.TaskReporter {
	if c.src.TaskOf == nil {
		return nil
	}
	return c.src.TaskOf(rec)
}

// sample reads path and returns it with the CPU rate since the previous
// sample (0 the first time).
func (c *Collector) sample(path string) (*cgroups.Stats, uint64, error) {
	if c.src.Cgroups == nil {
		return nil, 0, fmt.Errorf("cgroup statistics: %w", errdefs.ErrUnavailable)
	}
	return c.rate(path, func() (*cgroups.Stats, error) { return c.src.Cgroups.Stats(path) })
}

// rate reads a sample with read and returns it with the CPU rate since the
// previous sample under the same key (0 the first time).
func (c *Collector) rate(key string, read func() (*cgroups.Stats, error)) (*cgroups.Stats, uint64, error) {
	cur, err := read()
	if err != nil {
		return nil, 0, err
	}
	c.prev.mu.Lock()
	defer c.prev.mu.Unlock()
	if c.prev.prev == nil {
		c.prev.prev = map[string]*cgroups.Stats{}
	}
	var rate uint64
	if prev := c.prev.prev[key]; prev != nil {
		rate = cgroups.UsageNanoCores(prev, cur)
	}
	c.prev.prev[key] = cur
	return cur, rate, nil
}
