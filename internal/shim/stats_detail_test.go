package shim

import (
	"testing"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/podbay/podbay/internal/cgroups"
)

func packMetrics(t *testing.T, url string, m proto.Message) *anypb.Any {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: url, Value: b}
}

// TestStatsFromMetricsDetail: the finer numbers ListPodSandboxMetrics
// reports for vm handlers come through the shim's metrics.
func TestStatsFromMetricsDetail(t *testing.T) {
	at := time.Unix(100, 0)
	m1 := &v1.Metrics{Memory: &v1.MemoryStat{
		Usage:           &v1.MemoryEntry{Usage: 100, Max: 150, Failcnt: 4},
		Kernel:          &v1.MemoryEntry{Usage: 12},
		TotalMappedFile: 5, TotalActiveFile: 6, TotalInactiveFile: 7,
	}}
	s, err := statsFromMetrics(packMetrics(t, metricsV1URL, m1), at)
	if err != nil {
		t.Fatal(err)
	}
	want := cgroups.MemoryDetail{MaxUsage: 150, Failcnt: 4, MappedFile: 5, ActiveFile: 6, InactiveFile: 7, KernelUsage: 12}
	if s.MemoryDetail != want || s.PSI != nil {
		t.Errorf("v1: detail %+v pressure %+v, want %+v and no pressure", s.MemoryDetail, s.PSI, want)
	}

	psi := func(some, full uint64) *v2.PSIStats {
		return &v2.PSIStats{Some: &v2.PSIData{Avg10: 1.5, Total: some}, Full: &v2.PSIData{Total: full}}
	}
	m2 := &v2.Metrics{
		CPU:          &v2.CPUStat{UsageUsec: 1, PSI: psi(10, 1)},
		Memory:       &v2.MemoryStat{Usage: 100, MaxUsage: 200, FileMapped: 3, ActiveFile: 4, InactiveFile: 5, PSI: psi(20, 2)},
		MemoryEvents: &v2.MemoryEvents{Max: 9},
		Io:           &v2.IOStat{PSI: psi(30, 3)},
	}
	s, err = statsFromMetrics(packMetrics(t, metricsV2URL, m2), at)
	if err != nil {
		t.Fatal(err)
	}
	want = cgroups.MemoryDetail{MaxUsage: 200, Failcnt: 9, MappedFile: 3, ActiveFile: 4, InactiveFile: 5}
	if s.MemoryDetail != want {
		t.Errorf("v2: detail %+v, want %+v", s.MemoryDetail, want)
	}
	p := s.PSI
	if p == nil || p.CPU == nil || p.Memory == nil || p.IO == nil ||
		*p.CPU != (cgroups.PSIResource{Some: cgroups.PSILine{Avg10: 1.5, TotalNanos: 10000}, Full: cgroups.PSILine{TotalNanos: 1000}}) ||
		*p.Memory != (cgroups.PSIResource{Some: cgroups.PSILine{Avg10: 1.5, TotalNanos: 20000}, Full: cgroups.PSILine{TotalNanos: 2000}}) ||
		*p.IO != (cgroups.PSIResource{Some: cgroups.PSILine{Avg10: 1.5, TotalNanos: 30000}, Full: cgroups.PSILine{TotalNanos: 3000}}) {
		t.Errorf("v2 pressure = %+v", p)
	}

	// A shim whose kernel has no PSI sends none.
	m2.CPU.PSI, m2.Memory.PSI, m2.Io = nil, nil, nil
	if s, err = statsFromMetrics(packMetrics(t, metricsV2URL, m2), at); err != nil || s.PSI != nil {
		t.Errorf("v2 without PSI: pressure %+v, err %v", s.PSI, err)
	}
}
