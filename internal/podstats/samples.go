package podstats

import (
	"context"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/sandbox"
)

// statsSamples holds the last background sample of every container's and
// pod's statistics (stats_collect_period), so that ListContainerStats and
// ListPodSandboxStats with a thousand pods read memory, not a thousand
// cgroups and writable layers: the kubelet polls them every few seconds,
// and a fresh read of one container costs about half a millisecond. A
// sample is served only while the object is still in the state it was
// sampled in; one that started, stopped or changed its containers since
// is read again on the spot. The samples carry their own timestamps.
type statsSamples struct {
	mu   sync.RWMutex
	ctrs map[string]ctrSample // by container ID; guarded by mu
	pods map[string]podSample // by sandbox ID; guarded by mu
}

type ctrSample struct {
	state container.State
	stats *runtimeapi.ContainerStats
}

type podSample struct {
	phase sandbox.Phase
	ctrs  int // the pod's published containers when sampled
	stats *runtimeapi.PodSandboxStats
}

// Run samples every Period until ctx ends, the first time once ready is
// closed; with no Period it returns at once.
func (c *Collector) Run(ctx context.Context, ready <-chan struct{}) {
	period := c.src.Period
	if period <= 0 {
		return
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return
	}
	// A first sample right away, so that the kubelet's first poll
	// after a restart is answered from memory too.
	c.Collect(ctx)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.Collect(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// Collect samples every published container and pod and replaces the
// stored samples, dropping those of objects gone since.
func (c *Collector) Collect(ctx context.Context) {
	start := time.Now()
	ctrs := map[string]ctrSample{}
	for _, ctr := range c.src.Containers.List() {
		if ctx.Err() != nil {
			return
		}
		state := ctr.Record().State
		st, err := c.ContainerStats(ctx, ctr)
		if err != nil {
			log.G(ctx).Debug("sample container statistics", "container", ctr.ID, "err", err)
			continue
		}
		ctrs[ctr.ID] = ctrSample{state: state, stats: st}
	}
	nctrs := len(ctrs)
	c.samples.mu.Lock()
	c.samples.ctrs = ctrs // from here on guarded by c.samples.mu
	c.samples.mu.Unlock()

	pods := map[string]podSample{}
	for _, sb := range c.src.Sandboxes.List() {
		if ctx.Err() != nil {
			return
		}
		phase := sb.Phase()
		n := len(c.src.Containers.InSandbox(sb.ID))
		st, err := c.podStatsWith(ctx, sb, c.CachedContainerStats)
		if err != nil {
			log.G(ctx).Debug("sample pod statistics", "sandbox", sb.ID, "err", err)
			continue
		}
		pods[sb.ID] = podSample{phase: phase, ctrs: n, stats: st}
	}
	npods := len(pods)
	c.samples.mu.Lock()
	c.samples.pods = pods
	c.samples.mu.Unlock()
	log.G(ctx).Debug("sampled statistics", "containers", nctrs, "pods", npods, "duration", time.Since(start))
}

// CachedContainerStats returns ctr's statistics from its last sample when
// that sample is of ctr's current state, else reads them (and keeps them
// when sampling is on).
func (c *Collector) CachedContainerStats(ctx context.Context, ctr *container.Container) (*runtimeapi.ContainerStats, error) {
	rec := ctr.Record()
	if c.src.Period <= 0 {
		return c.ContainerStats(ctx, ctr)
	}
	c.samples.mu.RLock()
	smp, ok := c.samples.ctrs[ctr.ID]
	c.samples.mu.RUnlock()
	if !ok || smp.state != rec.State {
		st, err := c.ContainerStats(ctx, ctr)
		if err != nil {
			return nil, err
		}
		smp = ctrSample{state: rec.State, stats: st}
		c.samples.mu.Lock()
		if c.samples.ctrs == nil {
			c.samples.ctrs = map[string]ctrSample{}
		}
		c.samples.ctrs[ctr.ID] = smp
		c.samples.mu.Unlock()
	}
	// The sample's messages are shared by every answer until the next
	// sample replaces them: they are only read (marshalled) from here on.
	// The attributes are the record's current ones.
	st := smp.stats
	return &runtimeapi.ContainerStats{
		Attributes: containerAttributes(rec),
		Cpu:        st.Cpu, Memory: st.Memory, WritableLayer: st.WritableLayer, Swap: st.Swap, Io: st.Io,
	}, nil
}

// CachedPodStats is CachedContainerStats for a pod: its sample stands
// while the pod is in the same phase with the same number of containers.
func (c *Collector) CachedPodStats(ctx context.Context, sb *sandbox.Sandbox) (*runtimeapi.PodSandboxStats, error) {
	if c.src.Period <= 0 {
		return c.PodStats(ctx, sb)
	}
	phase := sb.Phase()
	n := len(c.src.Containers.InSandbox(sb.ID))
	c.samples.mu.RLock()
	smp, ok := c.samples.pods[sb.ID]
	c.samples.mu.RUnlock()
	if ok && smp.phase == phase && smp.ctrs == n {
		return smp.stats, nil
	}
	st, err := c.podStatsWith(ctx, sb, c.CachedContainerStats)
	if err != nil {
		return nil, err
	}
	c.samples.mu.Lock()
	if c.samples.pods == nil {
		c.samples.pods = map[string]podSample{}
	}
	c.samples.pods[sb.ID] = podSample{phase: phase, ctrs: n, stats: st}
	c.samples.mu.Unlock()
	return st, nil
}

// Sampled reports whether container id has a background sample (what a
// collection keeps of the containers still published).
func (c *Collector) Sampled(id string) bool {
	c.samples.mu.RLock()
	defer c.samples.mu.RUnlock()
	_, ok := c.samples.ctrs[id]
	return ok
}

func containerAttributes(rec container.Record) *runtimeapi.ContainerAttributes {
	return &runtimeapi.ContainerAttributes{
		Id:          rec.ID,
		Metadata:    &runtimeapi.ContainerMetadata{Name: rec.MetaName, Attempt: rec.Attempt},
		Labels:      rec.Labels,
		Annotations: rec.Annotations,
	}
}
