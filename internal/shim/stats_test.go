package shim

import (
	"testing"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestStatsFromMetrics(t *testing.T) {
	at := time.Unix(100, 0)
	pack := func(url string, m proto.Message) *anypb.Any {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return &anypb.Any{TypeUrl: url, Value: b}
	}

	m1 := &v1.Metrics{
		CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 5e9, User: 3e9, Kernel: 2e9}, Throttling: &v1.Throttle{Periods: 10, ThrottledPeriods: 2, ThrottledTime: 7}},
		Memory: &v1.MemoryStat{
			Usage: &v1.MemoryEntry{Usage: 100 << 20, Limit: 9223372036854771712}, Swap: &v1.MemoryEntry{Usage: 110 << 20},
			TotalInactiveFile: 30 << 20, TotalRSS: 60 << 20, TotalCache: 40 << 20, TotalPgFault: 9, TotalPgMajFault: 1,
		},
		MemoryOomControl: &v1.MemoryOomControl{OomKill: 1},
		Pids:             &v1.PidsStat{Current: 3, Limit: 100},
	}
	s, err := statsFromMetrics(pack("io.containerd.cgroups.v1.Metrics", m1), at)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPU.UsageNanos != 5e9 || s.CPU.ThrottledPeriods != 2 || s.Memory.WorkingSet != 70<<20 || s.Memory.Limit != 0 ||
		s.Memory.Swap != 10<<20 || s.Memory.OOMKills != 1 || s.Pids.Current != 3 || !s.Timestamp.Equal(at) {
		t.Errorf("v1: %+v", s)
	}

	m2 := &v2.Metrics{
		CPU:          &v2.CPUStat{UsageUsec: 2000, UserUsec: 1500, SystemUsec: 500},
		Memory:       &v2.MemoryStat{Usage: 50 << 20, UsageLimit: 64 << 20, InactiveFile: 60 << 20, Anon: 20 << 20, File: 30 << 20},
		MemoryEvents: &v2.MemoryEvents{OomKill: 2},
	}
	s, err = statsFromMetrics(pack("type.googleapis.com/io.containerd.cgroups.v2.Metrics", m2), at)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPU.UsageNanos != 2e6 || s.Memory.WorkingSet != 0 || s.Memory.Limit != 64<<20 || s.Memory.Available() != 64<<20 || s.Memory.OOMKills != 2 {
		t.Errorf("v2: %+v", s)
	}

	if _, err := statsFromMetrics(&anypb.Any{TypeUrl: "example.Other"}, at); err == nil {
		t.Error("unknown type decoded")
	}
	if _, err := statsFromMetrics(nil, at); err == nil {
		t.Error("nil decoded")
	}
}
