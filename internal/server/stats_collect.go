package server

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

// statsPeriod is the background sampling period; 0 means none.
func (s *Server) statsPeriod() time.Duration {
	return time.Duration(s.cfg.StatsCollectPeriod)
}

// startStatsCollector samples every period, once recovery has finished,
// until the server stops.
func (s *Server) startStatsCollector() {
	period := s.statsPeriod()
	if period <= 0 {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		select {
		case <-s.recovered:
		case <-s.ctx.Done():
			return
		}
		// A first sample right away, so that the kubelet's first poll
		// after a restart is answered from memory too.
		s.collectStats(s.ctx)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.collectStats(s.ctx)
			case <-s.ctx.Done():
				return
			}
		}
	}()
}

// collectStats samples every published container and pod and replaces the
// stored samples, dropping those of objects gone since.
func (s *Server) collectStats(ctx context.Context) {
	start := time.Now()
	ctrs := map[string]ctrSample{}
	for _, c := range s.containers.List() {
		if ctx.Err() != nil {
			return
		}
		state := c.Record().State
		st, err := s.containerStats(ctx, c)
		if err != nil {
			log.G(ctx).Debug("sample container statistics", "container", c.ID, "err", err)
			continue
		}
		ctrs[c.ID] = ctrSample{state: state, stats: st}
	}
	nctrs := len(ctrs)
	s.samples.mu.Lock()
	s.samples.ctrs = ctrs // from here on guarded by s.samples.mu
	s.samples.mu.Unlock()

	pods := map[string]podSample{}
	for _, sb := range s.index.List() {
		if ctx.Err() != nil {
			return
		}
		phase := sb.Phase()
		n := len(s.containers.InSandbox(sb.ID))
		st, err := s.podStatsWith(ctx, sb, s.cachedContainerStats)
		if err != nil {
			log.G(ctx).Debug("sample pod statistics", "sandbox", sb.ID, "err", err)
			continue
		}
		pods[sb.ID] = podSample{phase: phase, ctrs: n, stats: st}
	}
	npods := len(pods)
	s.samples.mu.Lock()
	s.samples.pods = pods
	s.samples.mu.Unlock()
	log.G(ctx).Debug("sampled statistics", "containers", nctrs, "pods", npods, "duration", time.Since(start))
}

// cachedContainerStats returns c's statistics from its last sample when
// that sample is of c's current state, else reads them (and keeps them when
// sampling is on).
func (s *Server) cachedContainerStats(ctx context.Context, c *container.Container) (*runtimeapi.ContainerStats, error) {
	rec := c.Record()
	if s.statsPeriod() <= 0 {
		return s.containerStats(ctx, c)
	}
	s.samples.mu.RLock()
	smp, ok := s.samples.ctrs[c.ID]
	s.samples.mu.RUnlock()
	if !ok || smp.state != rec.State {
		st, err := s.containerStats(ctx, c)
		if err != nil {
			return nil, err
		}
		smp = ctrSample{state: rec.State, stats: st}
		s.samples.mu.Lock()
		if s.samples.ctrs == nil {
			s.samples.ctrs = map[string]ctrSample{}
		}
		s.samples.ctrs[c.ID] = smp
		s.samples.mu.Unlock()
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

// cachedPodStats is cachedContainerStats for a pod: its sample stands while
// the pod is in the same phase with the same number of containers.
func (s *Server) cachedPodStats(ctx context.Context, sb *sandbox.Sandbox) (*runtimeapi.PodSandboxStats, error) {
	if s.statsPeriod() <= 0 {
		return s.podStats(ctx, sb)
	}
	phase := sb.Phase()
	n := len(s.containers.InSandbox(sb.ID))
	s.samples.mu.RLock()
	smp, ok := s.samples.pods[sb.ID]
	s.samples.mu.RUnlock()
	if ok && smp.phase == phase && smp.ctrs == n {
		return smp.stats, nil
	}
	st, err := s.podStatsWith(ctx, sb, s.cachedContainerStats)
	if err != nil {
		return nil, err
	}
	s.samples.mu.Lock()
	if s.samples.pods == nil {
		s.samples.pods = map[string]podSample{}
	}
	s.samples.pods[sb.ID] = podSample{phase: phase, ctrs: n, stats: st}
	s.samples.mu.Unlock()
	return st, nil
}

func containerAttributes(rec container.Record) *runtimeapi.ContainerAttributes {
	return &runtimeapi.ContainerAttributes{
		Id:          rec.ID,
		Metadata:    &runtimeapi.ContainerMetadata{Name: rec.MetaName, Attempt: rec.Attempt},
		Labels:      rec.Labels,
		Annotations: rec.Annotations,
	}
}
