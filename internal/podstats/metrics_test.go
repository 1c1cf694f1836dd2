package podstats

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/procfs"
)

// Every descriptor names its definition's labels after the base ones, and
// the types follow cAdvisor's names: counters end in _total, but for
// cAdvisor's container_memory_failcnt counter and container_fs_inodes_total
// gauge.
func TestDescriptors(t *testing.T) {
	ds := Descriptors()
	if len(ds) != int(numMetrics) {
		t.Fatalf("%d descriptors, want %d", len(ds), numMetrics)
	}
	for i, d := range ds {
		def := metricDefs[i]
		if d.Name != def.name || d.Help == "" || len(d.LabelKeys) != len(metricBaseLabels)+len(def.labels) {
			t.Errorf("descriptor %d %v, definition %v", i, d, def)
		}
		wantCounter := strings.HasSuffix(d.Name, "_total") != (d.Name == "container_fs_inodes_total") || d.Name == "container_memory_failcnt"
		if wantCounter != (def.typ == counter) {
			t.Errorf("%s is a %v", d.Name, def.typ)
		}
	}
}

// checkMetrics fails on a metric the kubelet would drop: no descriptor,
// a label count that does not match its keys, a type that differs from
// the definition's, no timestamp or no value. It returns the metrics by
// name and label values.
func checkMetrics(t *testing.T, ms []*runtimeapi.Metric) map[string]uint64 {
	t.Helper()
	descs := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range Descriptors() {
		descs[d.Name] = d
	}
	defs := map[string]metricDef{}
	for _, d := range metricDefs {
		defs[d.name] = d
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
		case m.MetricType != defs[m.Name].typ:
			t.Errorf("metric %s is a %v, its definition a %v", m.Name, m.MetricType, defs[m.Name].typ)
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

func TestAddSpec(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name string
		spec *specs.Spec
		want map[string]uint64
	}{
		{"no spec", nil, map[string]uint64{}},
		{"unlimited", &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{
			Memory: &specs.LinuxMemory{Limit: p(-1), Swap: p(-1)},
		}}}, map[string]uint64{
			"container_spec_cpu_period": 0, "container_spec_cpu_shares": 0, "container_spec_memory_limit_bytes": 0,
			"container_spec_memory_reservation_limit_bytes": 0, "container_spec_memory_swap_limit_bytes": 0,
		}},
		{"limits and nofile", &specs.Spec{
			Process: &specs.Process{Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096}, {Type: "RLIMIT_CORE", Soft: 0}}},
			Linux: &specs.Linux{Resources: &specs.LinuxResources{
				CPU:    &specs.LinuxCPU{Period: u(100000), Quota: p(20000), Shares: u(2)},
				Memory: &specs.LinuxMemory{Limit: p(1 << 30), Reservation: p(1 << 20), Swap: p(2 << 30)},
			}},
		}, map[string]uint64{
			"container_spec_cpu_period": 100000, "container_spec_cpu_quota": 20000, "container_spec_cpu_shares": 2,
			"container_spec_memory_limit_bytes": 1 << 30, "container_spec_memory_reservation_limit_bytes": 1 << 20,
			"container_spec_memory_swap_limit_bytes": 2 << 30, "container_ulimits_soft{max_open_files}": 1024,
		}},
	} {
		m := newMetricSet(time.Now(), "p", "n", "c", "id", "img")
		m.addSpec(tc.spec)
		got := checkMetrics(t, m.out)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for k, v := range tc.want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %d (present %v), want %d", tc.name, k, g, ok, v)
			}
		}
	}
}

func TestNetworkMetrics(t *testing.T) {
	devs := []procfs.NetDev{
		{Name: "eth0", RxBytes: 2282, RxPackets: 23, RxErrors: 1, RxDropped: 2, TxBytes: 1116, TxPackets: 12, TxErrors: 3, TxDropped: 4},
		{Name: "net1", RxBytes: 18446744073709551615, RxPackets: 1, TxBytes: 5, TxPackets: 6},
	}
	m := newMetricSet(time.Now(), "p", "n", "", "id", "")
	m.addNetwork(devs)
	got := checkMetrics(t, m.out)
	if got["container_network_receive_bytes_total{eth0}"] != 2282 || got["container_network_transmit_packets_dropped_total{eth0}"] != 4 ||
		len(got) != 16 {
		t.Errorf("network metrics %v", got)
	}
}

func TestCountFDs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fds, sockets := countFDs([]int{os.Getpid(), 1 << 30}) // the second is no process
	if fds < 4 || sockets < 1 || sockets > fds {
		t.Errorf("countFDs = %d fds, %d sockets; want this process's stdio and listener", fds, sockets)
	}
}

// TestCFSMetricsWithQuota: a container whose spec sets a CPU quota sends
// the CFS counters even before a period elapsed (zeros), as cAdvisor
// does, which decides on the spec's quota; without a quota and without
// periods they are left out.
func TestCFSMetricsWithQuota(t *testing.T) {
	quota := int64(50000)
	spec := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota}}}}
	for _, tc := range []struct {
		name string
		spec *specs.Spec
		want bool
	}{{"quota", spec, true}, {"no quota", &specs.Spec{}, false}, {"no spec", nil, false}} {
		m := newMetricSet(time.Now(), "p", "n", "c", "id", "img")
		m.addCgroup(&cgroups.Stats{}, false, hasCPUQuota(tc.spec))
		got := checkMetrics(t, m.out)
		for _, k := range []string{"container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total", "container_cpu_cfs_throttled_seconds_total"} {
			if v, ok := got[k]; ok != tc.want || v != 0 {
				t.Errorf("%s: %s = %d, present %v, want present %v", tc.name, k, v, ok, tc.want)
			}
		}
	}
}
