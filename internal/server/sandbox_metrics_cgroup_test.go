package server

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/podstats"
)

// writeFiles writes files (path relative to root → content).
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	fixturePressure = "some avg10=0.00 avg60=0.00 avg300=0.00 total=7000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\n"
	v2FixtureStat   = "anon 3000000\nfile 1000000\nkernel 200000\nfile_mapped 4096\nactive_file 600000\ninactive_file 400000\npgfault 50\npgmajfault 2\n"
	v1FixtureStat   = "total_rss 3000000\ntotal_cache 1000000\ntotal_mapped_file 4096\ntotal_active_file 600000\ntotal_inactive_file 400000\ntotal_pgfault 50\ntotal_pgmajfault 2\n"
)

// cgroupFixture lays out a container cgroup at rel under a fake
// /sys/fs/cgroup of the given version, holding this test process (so that
// its descriptors are counted from the real /proc).
func cgroupFixture(t *testing.T, v2 bool, rel string) string {
	t.Helper()
	root := t.TempDir()
	procs := strconv.Itoa(os.Getpid()) + "\n"
	if v2 {
		writeFiles(t, root, map[string]string{
			"cgroup.controllers":         "cpu memory pids\n",
			rel + "/cgroup.procs":        procs,
			rel + "/cpu.stat":            "usage_usec 5500000\nuser_usec 3100000\nsystem_usec 2400000\nnr_periods 40\nnr_throttled 4\nthrottled_usec 1000000\n",
			rel + "/memory.current":      "5000000\n",
			rel + "/memory.max":          "max\n",
			rel + "/memory.peak":         "6000000\n",
			rel + "/memory.stat":         v2FixtureStat,
			rel + "/memory.events":       "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
			rel + "/memory.swap.current": "0\n",
			rel + "/pids.current":        "5\n",
			rel + "/pids.max":            "64\n",
			rel + "/cpu.pressure":        fixturePressure,
			rel + "/memory.pressure":     fixturePressure,
			rel + "/io.pressure":         fixturePressure,
		})
		return root
	}
	files := map[string]string{
		"unified/cgroup.controllers":                   "\n",
		"unified/cgroup.procs":                         "1\n",
		"unified" + rel + "/cgroup.procs":              procs,
		"unified" + rel + "/cpu.pressure":              fixturePressure,
		"unified" + rel + "/memory.pressure":           fixturePressure,
		"unified" + rel + "/io.pressure":               fixturePressure,
		"cpuacct" + rel + "/cpuacct.usage":             "5500000000\n",
		"cpuacct" + rel + "/cpuacct.usage_user":        "3100000000\n",
		"cpuacct" + rel + "/cpuacct.usage_sys":         "2400000000\n",
		"cpu" + rel + "/cpu.stat":                      "nr_periods 40\nnr_throttled 4\nthrottled_time 1000000000\n",
		"memory" + rel + "/memory.usage_in_bytes":      "5000000\n",
		"memory" + rel + "/memory.max_usage_in_bytes":  "6000000\n",
		"memory" + rel + "/memory.limit_in_bytes":      "9223372036854771712\n",
		"memory" + rel + "/memory.failcnt":             "3\n",
		"memory" + rel + "/memory.kmem.usage_in_bytes": "200000\n",
		"memory" + rel + "/memory.stat":                v1FixtureStat,
		"memory" + rel + "/memory.oom_control":         "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
		"pids" + rel + "/cgroup.procs":                 procs,
		"pids" + rel + "/pids.current":                 "5\n",
		"pids" + rel + "/pids.max":                     "64\n",
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids"} {
		files[c+"/cgroup.procs"] = "1\n"
	}
	writeFiles(t, root, files)
	return root
}

// TestListPodSandboxMetricsCgroupFiles reads a container's metrics with
// the real cgroup reader from v1 (hybrid) and v2 fixture trees, and feeds
// them to a Prometheus registry the way the kubelet's CRI metrics
// collector does: descriptors first, then const metrics with timestamps.
func TestListPodSandboxMetricsCgroupFiles(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2"
		}
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, "")
			web := e.podWithImage(t, "web")
			id := e.mustCreate(t, web, containerConfig("c"))
			root := cgroupFixture(t, v2, e.cfg.DefaultCgroupParent+"/podbay-"+id)
			r, err := cgroups.New(root)
			if err != nil {
				t.Fatal(err)
			}
			// Swapped before the container starts: nothing reads it yet.
			e.cg.mu.Lock()
			e.cg.reader = r
			e.cg.mu.Unlock()
			e.startFakeContainer(t, id)

			pm := e.listPodMetrics(t)[web]
			if pm == nil || len(pm.ContainerMetrics) != 1 {
				t.Fatalf("pod metrics %v", pm)
			}
			got := checkMetrics(t, pm.ContainerMetrics[0].Metrics)
			for k, want := range map[string]uint64{
				"container_cpu_usage_seconds_total{total}":              5,
				"container_cpu_user_seconds_total":                      3,
				"container_cpu_system_seconds_total":                    2,
				"container_cpu_cfs_periods_total":                       40,
				"container_cpu_cfs_throttled_periods_total":             4,
				"container_cpu_cfs_throttled_seconds_total":             1,
				"container_memory_usage_bytes":                          5000000,
				"container_memory_working_set_bytes":                    4600000,
				"container_memory_rss":                                  3000000,
				"container_memory_cache":                                1000000,
				"container_memory_max_usage_bytes":                      6000000,
				"container_memory_failcnt":                              3,
				"container_memory_kernel_usage":                         200000,
				"container_memory_mapped_file":                          4096,
				"container_memory_total_active_file_bytes":              600000,
				"container_memory_total_inactive_file_bytes":            400000,
				"container_memory_failures_total{pgfault,container}":    50,
				"container_memory_failures_total{pgmajfault,hierarchy}": 2,
				"container_oom_events_total":                            1,
				"container_processes":                                   1,
				"container_threads":                                     5,
				"container_threads_max":                                 64,
				"container_pressure_cpu_stalled_seconds_total":          2,
				"container_pressure_cpu_waiting_seconds_total":          7,
				"container_pressure_io_stalled_seconds_total":           2,
				"container_pressure_memory_waiting_seconds_total":       7,
			} {
				if v, ok := got[k]; !ok || v != want {
					t.Errorf("%s = %d (present %v), want %d", k, v, ok, want)
				}
			}
			// ContainerStats reads the same pressure as the metrics:
			// 7 s waiting ("some"), 2 s stalled ("full"), in ns.
			resp, err := call(e.srv, "ContainerStats", e.srv.ContainerStats, &runtimeapi.ContainerStatsRequest{ContainerId: id})
			if err != nil {
				t.Fatalf("ContainerStats: %v", err)
			}
			linux := resp.GetStats()
			for res, p := range map[string]*runtimeapi.PsiStats{
				"cpu": linux.GetCpu().GetPsi(), "memory": linux.GetMemory().GetPsi(), "io": linux.GetIo().GetPsi(),
			} {
				if p.GetSome().GetTotal() != 7e9 || p.GetFull().GetTotal() != 2e9 {
					t.Errorf("ContainerStats %s psi = %v, want some 7e9 ns and full 2e9 ns, as the metrics", res, p)
				}
			}
			if got["container_file_descriptors"] < 3 {
				t.Errorf("container_file_descriptors = %d, want this process's", got["container_file_descriptors"])
			}

			// The kubelet's view.
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(&kubeletCollector{descs: podstats.Descriptors(), metrics: func() []*runtimeapi.PodSandboxMetrics {
				return []*runtimeapi.PodSandboxMetrics{pm}
			}}); err != nil {
				t.Fatal(err)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather: %v", err)
			}
			var n int
			for _, f := range families {
				n += len(f.Metric)
				for _, m := range f.Metric {
					if m.GetTimestampMs() == 0 {
						t.Errorf("%s without a timestamp", f.GetName())
					}
				}
			}
			if n != len(pm.Metrics)+len(pm.ContainerMetrics[0].Metrics) {
				t.Errorf("registry holds %d samples, the response %d", n, len(pm.Metrics)+len(pm.ContainerMetrics[0].Metrics))
			}
		})
	}
}

// kubeletCollector is what the kubelet's criMetricsCollector does with the
// two RPCs' answers (pkg/kubelet/metrics/collectors/cri_metrics.go).
type kubeletCollector struct {
	descs   []*runtimeapi.MetricDescriptor
	metrics func() []*runtimeapi.PodSandboxMetrics
}

func (c *kubeletCollector) byName() map[string]*prometheus.Desc {
	out := map[string]*prometheus.Desc{}
	for _, d := range c.descs {
		out[d.Name] = prometheus.NewDesc(d.Name, d.Help, d.LabelKeys, nil)
	}
	return out
}

func (c *kubeletCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.byName() {
		ch <- d
	}
}

func (c *kubeletCollector) Collect(ch chan<- prometheus.Metric) {
	descs := c.byName()
	emit := func(ms []*runtimeapi.Metric) {
		for _, m := range ms {
			typ := prometheus.GaugeValue
			if m.MetricType == runtimeapi.MetricType_COUNTER {
				typ = prometheus.CounterValue
			}
			pm, err := prometheus.NewConstMetric(descs[m.Name], typ, float64(m.GetValue().GetValue()), m.LabelValues...)
			if err != nil {
				ch <- prometheus.NewInvalidMetric(descs[m.Name], err)
				continue
			}
			ch <- prometheus.NewMetricWithTimestamp(time.Unix(0, m.Timestamp), pm)
		}
	}
	for _, p := range c.metrics() {
		emit(p.Metrics)
		for _, cm := range p.ContainerMetrics {
			emit(cm.Metrics)
		}
	}
}
