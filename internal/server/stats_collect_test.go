package server

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
)

// With stats_collect_period set, ListContainerStats and ListPodSandboxStats
// answer from the last background sample while each container and pod is
// in the state it was sampled in, read again what changed since, and a new
// sample replaces the old and forgets what is gone.
func TestStatsSamples(t *testing.T) {
	e := newTestEnv(t, "")
	// Sampling on, once at start-up (no pod yet) and then by hand.
	e.srv.Shutdown(t.Context())
	e.cfg.StatsCollectPeriod = config.Duration(time.Hour)
	e.srv = e.newServer(t, nil)
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	e.startFakeContainer(t, id)
	cgroup := e.cfg.DefaultCgroupParent + "/podbay-" + id
	e.cg.set(cgroup, 1e9, 1<<20)

	list := func() map[string]*runtimeapi.ContainerStats {
		t.Helper()
		resp, err := call(e.srv, "ListContainerStats", e.srv.ListContainerStats, &runtimeapi.ListContainerStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*runtimeapi.ContainerStats{}
		for _, st := range resp.Stats {
			out[st.Attributes.Id] = st
		}
		return out
	}
	podCPU := func() uint64 {
		t.Helper()
		resp, err := call(e.srv, "ListPodSandboxStats", e.srv.ListPodSandboxStats, &runtimeapi.ListPodSandboxStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Stats) != 1 || len(resp.Stats[0].Linux.Containers) != 1 {
			t.Fatalf("ListPodSandboxStats: %v", resp.Stats)
		}
		return resp.Stats[0].Linux.Containers[0].Cpu.GetUsageCoreNanoSeconds().GetValue()
	}
	bump := func(usage uint64) {
		e.cg.mu.Lock()
		e.cg.stats[cgroup].Timestamp = e.cg.stats[cgroup].Timestamp.Add(time.Second)
		e.cg.stats[cgroup].CPU.UsageNanos = usage
		e.cg.mu.Unlock()
	}

	// Nothing sampled yet: read on the spot, and kept.
	if st := list()[id]; st.GetCpu().GetUsageCoreNanoSeconds().GetValue() != 1e9 || st.Attributes.Labels["ctr"] != "c" {
		t.Fatalf("first read: %v", st)
	}
	if got := podCPU(); got != 1e9 {
		t.Fatalf("pod's container CPU %d, want 1e9", got)
	}
	bump(1.5e9)
	if got := list()[id].Cpu.UsageCoreNanoSeconds.Value; got != 1e9 {
		t.Errorf("between samples: CPU %d, want the kept 1e9", got)
	}
	if got := podCPU(); got != 1e9 {
		t.Errorf("between samples: pod's container CPU %d, want the kept 1e9", got)
	}

	e.srv.stats.Collect(t.Context())
	st := list()[id]
	if st.Cpu.UsageCoreNanoSeconds.Value != 1.5e9 || st.Cpu.UsageNanoCores.Value != 5e8 {
		t.Errorf("after a sample: CPU %d, rate %d; want 1.5e9, 5e8", st.Cpu.UsageCoreNanoSeconds.Value, st.Cpu.UsageNanoCores.Value)
	}
	if got := podCPU(); got != 1.5e9 {
		t.Errorf("after a sample: pod's container CPU %d, want 1.5e9", got)
	}

	// A second container changes the pod: its sample is not served.
	other := e.mustCreate(t, pod, containerConfig("other"))
	resp, err := call(e.srv, "ListPodSandboxStats", e.srv.ListPodSandboxStats, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(resp.Stats) != 1 || len(resp.Stats[0].Linux.Containers) != 2 {
		t.Fatalf("pod stats after adding a container: %v, %v", resp, err)
	}
	if st := list()[other]; st == nil || st.Cpu != nil {
		t.Errorf("created container: %v", st)
	}

	// A stopped container is read again: no CPU any more.
	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	if st := list()[id]; st.Cpu != nil || st.WritableLayer == nil {
		t.Errorf("stopped container served its running sample: %v", st)
	}

	// Removed: gone from the answers at once, and from the samples at the
	// next collection.
	if _, err := call(e.srv, "RemoveContainer", e.srv.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, ok := list()[id]; ok {
		t.Error("a removed container is listed")
	}
	e.srv.stats.Collect(t.Context())
	if e.srv.stats.Sampled(id) || !e.srv.stats.Sampled(other) {
		t.Errorf("after a collection: removed container sampled %v, the other %v; want false, true",
			e.srv.stats.Sampled(id), e.srv.stats.Sampled(other))
	}
}
