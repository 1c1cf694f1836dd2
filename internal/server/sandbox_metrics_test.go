package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/podstats"
	"github.com/podbay/podbay/internal/runtime"
)

// wantMetricNames is the public list: a metric dropped or renamed breaks
// the dashboards of users who move from cAdvisor, containerd or CRI-O.
var wantMetricNames = []string{
	"container_cpu_usage_seconds_total", "container_cpu_user_seconds_total", "container_cpu_system_seconds_total",
	"container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total", "container_cpu_cfs_throttled_seconds_total",
	"container_memory_cache", "container_memory_rss", "container_memory_kernel_usage", "container_memory_mapped_file",
	"container_memory_swap", "container_memory_failcnt", "container_memory_usage_bytes", "container_memory_max_usage_bytes",
	"container_memory_working_set_bytes", "container_memory_total_active_file_bytes", "container_memory_total_inactive_file_bytes",
	"container_memory_failures_total", "container_oom_events_total",
	"container_network_receive_bytes_total", "container_network_receive_packets_total",
	"container_network_receive_packets_dropped_total", "container_network_receive_errors_total",
	"container_network_transmit_bytes_total", "container_network_transmit_packets_total",
	"container_network_transmit_packets_dropped_total", "container_network_transmit_errors_total",
	"container_fs_usage_bytes", "container_fs_limit_bytes", "container_fs_inodes_total", "container_fs_inodes_free",
	"container_blkio_device_usage_total", "container_fs_reads_bytes_total", "container_fs_reads_total",
	"container_fs_writes_bytes_total", "container_fs_writes_total",
	"container_processes", "container_threads", "container_threads_max", "container_file_descriptors", "container_sockets",
	"container_ulimits_soft", "container_last_seen", "container_start_time_seconds",
	"container_spec_cpu_period", "container_spec_cpu_quota", "container_spec_cpu_shares", "container_spec_memory_limit_bytes",
	"container_spec_memory_reservation_limit_bytes", "container_spec_memory_swap_limit_bytes",
	"container_pressure_cpu_stalled_seconds_total", "container_pressure_cpu_waiting_seconds_total",
	"container_pressure_memory_stalled_seconds_total", "container_pressure_memory_waiting_seconds_total",
	"container_pressure_io_stalled_seconds_total", "container_pressure_io_waiting_seconds_total",
}

func TestListMetricDescriptors(t *testing.T) {
	e := newTestEnv(t, "")
	resp, err := call(e.srv, "ListMetricDescriptors", e.srv.ListMetricDescriptors, &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range resp.Descriptors {
		names = append(names, d.Name)
		if d.Help == "" {
			t.Errorf("%s has no help", d.Name)
		}
		if !slices.Equal(d.LabelKeys[:len(metricBaseLabels)], metricBaseLabels) {
			t.Errorf("%s label keys %v do not start with %v", d.Name, d.LabelKeys, metricBaseLabels)
		}
	}
	if !slices.Equal(names, wantMetricNames) {
		t.Errorf("descriptors\n%v\nwant\n%v", names, wantMetricNames)
	}
	// The same list every time: the kubelet reads it once.
	again, _ := call(e.srv, "ListMetricDescriptors", e.srv.ListMetricDescriptors, &runtimeapi.ListMetricDescriptorsRequest{})
	for i, d := range again.Descriptors {
		if d.Name != resp.Descriptors[i].Name || !slices.Equal(d.LabelKeys, resp.Descriptors[i].LabelKeys) {
			t.Errorf("descriptor %d changed: %v, then %v", i, resp.Descriptors[i], d)
		}
	}
}

// metricBaseLabels are the label keys every metric starts with.
var metricBaseLabels = []string{"pod", "namespace", "container", "id", "image"}

// checkMetrics fails on a metric the kubelet would drop: no descriptor,
// a label count that does not match its keys, no timestamp or no value
// (internal/podstats checks the types). It returns the metrics by name
// and label values.
func checkMetrics(t *testing.T, ms []*runtimeapi.Metric) map[string]uint64 {
	t.Helper()
	descs := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range podstats.Descriptors() {
		descs[d.Name] = d
	}
	out := map[string]uint64{}
	for _, m := range ms {
		d, ok := descs[m.Name]
		switch {
		case !ok:
			t.Errorf("metric %s has no descriptor", m.Name)
			continue
		case len(m.LabelValues) != len(d.LabelKeys):
			t.Errorf("metric %s has labels %v for keys %v", m.Name, m.LabelValues, d.LabelKeys)
		case m.Timestamp == 0 || m.Value == nil:
			t.Errorf("metric %s: timestamp %d value %v", m.Name, m.Timestamp, m.Value)
		}
		key := m.Name
		if extra := m.LabelValues[len(metricBaseLabels):]; len(extra) > 0 {
			key += "{" + strings.Join(extra, ",") + "}"
		}
		if _, dup := out[key]; dup {
			t.Errorf("metric %s sent twice", key)
		}
		out[key] = m.Value.GetValue()
	}
	return out
}

func richStats(cpu, mem uint64) *cgroups.Stats {
	return &cgroups.Stats{
		Timestamp: time.Now(),
		CPU: cgroups.CPUStats{UsageNanos: cpu, UserNanos: cpu / 2, SystemNanos: cpu / 4,
			Periods: 10, ThrottledPeriods: 3, ThrottledNanos: 2e9},
		Memory: cgroups.MemoryStats{Usage: mem, WorkingSet: mem / 2, RSS: mem / 4, Cache: mem / 8, Swap: 7,
			PageFaults: 100, MajorPageFaults: 5, OOMKills: 1},
		MemoryDetail: cgroups.MemoryDetail{MaxUsage: 2 * mem, Failcnt: 9, MappedFile: 11, ActiveFile: 12, InactiveFile: 13, KernelUsage: 14},
		Pids:         cgroups.PidsStats{Current: 4, Limit: 100},
		PSI: &cgroups.PSIStats{
			CPU:    &cgroups.PSIResource{Some: cgroups.PSILine{TotalNanos: 3e9}, Full: cgroups.PSILine{TotalNanos: 1e9}},
			Memory: &cgroups.PSIResource{Some: cgroups.PSILine{TotalNanos: 5e9}, Full: cgroups.PSILine{TotalNanos: 4e9}},
		},
	}
}

func (e *testEnv) setStats(path string, st *cgroups.Stats) {
	e.cg.mu.Lock()
	defer e.cg.mu.Unlock()
	e.cg.stats[path] = st
}

func (e *testEnv) listPodMetrics(t *testing.T) map[string]*runtimeapi.PodSandboxMetrics {
	t.Helper()
	resp, err := call(e.srv, "ListPodSandboxMetrics", e.srv.ListPodSandboxMetrics, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*runtimeapi.PodSandboxMetrics{}
	for _, p := range resp.PodMetrics {
		out[p.PodSandboxId] = p
	}
	return out
}

func TestListPodSandboxMetrics(t *testing.T) {
	e := newTestEnv(t, "")
	web := e.podWithImage(t, "web")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 256 << 20,
	}}
	id := e.mustCreate(t, web, cfg)
	idle := e.mustCreate(t, web, containerConfig("idle")) // created, never started
	e.startFakeContainer(t, id)
	e.setStats(e.cfg.DefaultCgroupParent+"/podbay-"+id, richStats(3.5e9, 64<<20))
	e.setStats(e.cfg.DefaultCgroupParent+"/podbay-"+web, richStats(1e9, 1<<20))

	pods := e.listPodMetrics(t)
	pm := pods[web]
	if len(pods) != 1 || pm == nil {
		t.Fatalf("pods %v, want %s only", pods, web)
	}
	if len(pm.ContainerMetrics) != 1 || pm.ContainerMetrics[0].ContainerId != id {
		t.Fatalf("container metrics %v, want %s only (not the created %s)", pm.ContainerMetrics, id, idle)
	}
	got := checkMetrics(t, pm.ContainerMetrics[0].Metrics)
	for _, m := range pm.ContainerMetrics[0].Metrics {
		if want := []string{"web", "ns", "c", id, "busybox"}; !slices.Equal(m.LabelValues[:5], want) {
			t.Fatalf("%s labels %v, want %v", m.Name, m.LabelValues, want)
		}
	}
	for k, want := range map[string]uint64{
		"container_cpu_usage_seconds_total{total}":                  3, // whole seconds
		"container_cpu_user_seconds_total":                          1,
		"container_cpu_cfs_periods_total":                           10,
		"container_cpu_cfs_throttled_seconds_total":                 2,
		"container_memory_usage_bytes":                              64 << 20,
		"container_memory_working_set_bytes":                        32 << 20,
		"container_memory_rss":                                      16 << 20,
		"container_memory_max_usage_bytes":                          128 << 20,
		"container_memory_failcnt":                                  9,
		"container_memory_mapped_file":                              11,
		"container_memory_kernel_usage":                             14,
		"container_memory_swap":                                     7,
		"container_memory_failures_total{pgfault,container}":        100,
		"container_memory_failures_total{pgmajfault,hierarchy}":     5,
		"container_oom_events_total":                                1,
		"container_threads":                                         4,
		"container_threads_max":                                     100,
		"container_fs_usage_bytes{" + e.cfg.Image.StorageRoot + "}": 4096,
		"container_spec_cpu_period":                                 100000,
		"container_spec_cpu_quota":                                  50000,
		"container_spec_cpu_shares":                                 512,
		"container_spec_memory_limit_bytes":                         256 << 20,
		"container_pressure_cpu_stalled_seconds_total":              1,
		"container_pressure_cpu_waiting_seconds_total":              3,
		"container_pressure_memory_waiting_seconds_total":           5,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", k, v, ok, want)
		}
	}
	// The fake cgroups list pids.current processes that do not exist. No
	// io pressure file: no io pressure metric.
	if got["container_processes"] != 4 {
		t.Errorf("container_processes = %d, want 4", got["container_processes"])
	}
	if _, ok := got["container_pressure_io_stalled_seconds_total"]; ok {
		t.Error("io pressure reported without an io.pressure")
	}
	if now := uint64(time.Now().Unix()); got["container_last_seen"] < now-5 || got["container_last_seen"] > now {
		t.Errorf("container_last_seen = %d, now %d", got["container_last_seen"], now)
	}

	// Pod level: the sum of the pause's and the containers' cgroups, with
	// empty container and image labels and no per-container scope.
	pod := checkMetrics(t, pm.Metrics)
	for _, m := range pm.Metrics {
		if want := []string{"web", "ns", "", web, ""}; !slices.Equal(m.LabelValues[:5], want) {
			t.Fatalf("pod %s labels %v, want %v", m.Name, m.LabelValues, want)
		}
	}
	if pod["container_cpu_usage_seconds_total{total}"] != 4 || pod["container_memory_usage_bytes"] != 65<<20 {
		t.Errorf("pod cpu %d s memory %d, want 4 s and %d", pod["container_cpu_usage_seconds_total{total}"], pod["container_memory_usage_bytes"], 65<<20)
	}
	if _, ok := pod["container_memory_failures_total{pgfault,container}"]; ok {
		t.Error("pod reports a per-container scope")
	}

	// A container that stopped, and a pod that stopped, are left out.
	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	if pm := e.listPodMetrics(t)[web]; len(pm.GetContainerMetrics()) != 0 {
		t.Errorf("stopped container reported: %v", pm.GetContainerMetrics())
	}
	if err := e.stopPod(web); err != nil {
		t.Fatal(err)
	}
	if pods := e.listPodMetrics(t); len(pods) != 0 {
		t.Errorf("stopped pod reported: %v", pods)
	}
}

// A container whose cgroup went away between List and the read is left
// out, not an error.
func TestListPodSandboxMetricsContainerGone(t *testing.T) {
	e := newTestEnv(t, "")
	web := e.podWithImage(t, "web")
	id := e.mustCreate(t, web, containerConfig("c"))
	e.startFakeContainer(t, id)
	pm := e.listPodMetrics(t)[web]
	if pm == nil || len(pm.ContainerMetrics) != 0 {
		t.Errorf("pod metrics %v, want the pod without the container", pm)
	}
}

// fakeVMRuntime is a vm handler's runtime: statistics and processes come
// from the runtime, not from host cgroups.
type fakeVMRuntime struct {
	*fakeRuntime
	stats *cgroups.Stats
	pids  []int
}

func (f *fakeVMRuntime) TaskStats(ctx context.Context, id string) (*cgroups.Stats, error) {
	cp := *f.stats
	cp.Timestamp = time.Now()
	return &cp, nil
}

func (f *fakeVMRuntime) TaskPids(ctx context.Context, id string) ([]int, error) {
	return f.pids, nil
}

var _ runtime.TaskReporter = (*fakeVMRuntime)(nil)

func TestListPodSandboxMetricsVM(t *testing.T) {
	e := newTestEnv(t, "")
	vm := &fakeVMRuntime{fakeRuntime: newFakeRuntime(), stats: richStats(7e9, 8<<20), pids: []int{1, 2}}
	e.runtimes["vm"] = vm
	e.cfg.Runtimes["vm"] = config.Runtime{Path: "/bin/true"}
	e.srv = e.newServer(t, nil)

	resp, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: podConfig("kata"), RuntimeHandler: "vm"})
	if err != nil {
		t.Fatal(err)
	}
	pod := resp.PodSandboxId
	if _, err := e.img.ImportFromFiles(context.Background(), "busybox", nil, image.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	id := e.mustCreate(t, pod, containerConfig("c"))
	e.startFakeContainer(t, id)
	// A host cgroup of the same path is not what a vm handler reports.
	e.setStats(e.cfg.DefaultCgroupParent+"/podbay-"+id, richStats(1, 1))

	pm := e.listPodMetrics(t)[pod]
	if pm == nil || len(pm.ContainerMetrics) != 1 {
		t.Fatalf("pod metrics %v", pm)
	}
	got := checkMetrics(t, pm.ContainerMetrics[0].Metrics)
	if got["container_cpu_usage_seconds_total{total}"] != 7 || got["container_memory_usage_bytes"] != 8<<20 ||
		got["container_memory_max_usage_bytes"] != 16<<20 || got["container_pressure_memory_stalled_seconds_total"] != 4 {
		t.Errorf("vm container metrics %v", got)
	}
	if got["container_processes"] != 2 {
		t.Errorf("container_processes = %d, want the shim's 2", got["container_processes"])
	}
	// The container has a host cgroup (as containerd-shim-runc-v2's
	// have): the descriptors of its host processes are counted, as
	// cAdvisor counts them (critest v1.37 wants them).
	if _, ok := got["container_file_descriptors"]; !ok {
		t.Error("no file descriptors for a container with a host cgroup")
	}
	if _, ok := got["container_sockets"]; !ok {
		t.Error("no sockets for a container with a host cgroup")
	}

	// No host cgroup (a VM's containers): no descriptors, never a VM's
	// PIDs read on the host.
	e.cg.mu.Lock()
	delete(e.cg.stats, e.cfg.DefaultCgroupParent+"/podbay-"+id)
	e.cg.mu.Unlock()
	pm = e.listPodMetrics(t)[pod]
	if pm == nil || len(pm.ContainerMetrics) != 1 {
		t.Fatalf("pod metrics %v", pm)
	}
	got = checkMetrics(t, pm.ContainerMetrics[0].Metrics)
	if _, ok := got["container_file_descriptors"]; ok {
		t.Errorf("file descriptors reported for processes the host cannot see: %v", got)
	}
	if got["container_processes"] != 2 {
		t.Errorf("container_processes = %d, want the shim's 2", got["container_processes"])
	}
}
