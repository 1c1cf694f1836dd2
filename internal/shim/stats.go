package shim

import (
	"fmt"
	"strings"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/podbay/podbay/internal/cgroups"
)

// Type URLs of the metrics a shim's Stats returns: the cgroup statistics of
// the task, as containerd's cgroups package encodes them (the runc shim
// reports the host cgroup, Kata the container's cgroup inside the VM).
const (
	metricsV1URL = "io.containerd.cgroups.v1.Metrics"
	metricsV2URL = "io.containerd.cgroups.v2.Metrics"
)

// unlimited is where a cgroup v1 limit stops meaning a limit: the kernel
// reports "no limit" as PAGE_COUNTER_MAX pages, just under 2^63.
const unlimited = 1 << 62

// statsFromMetrics converts a shim's Stats answer into podbay's cgroup
// statistics, as internal/cgroups computes them from the files: working set
// is usage less inactive file pages, a limit of "max" is 0.
func statsFromMetrics(a *anypb.Any, at time.Time) (*cgroups.Stats, error) {
	if a == nil {
		return nil, fmt.Errorf("shim returned no statistics")
	}
	url := a.GetTypeUrl()
	url = url[strings.LastIndex(url, "/")+1:]
	switch url {
	case metricsV1URL:
		var m v1.Metrics
		if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", url, err)
		}
		return statsV1(&m, at), nil
	case metricsV2URL:
		var m v2.Metrics
		if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", url, err)
		}
		return statsV2(&m, at), nil
	}
	return nil, fmt.Errorf("shim statistics of unknown type %q", a.GetTypeUrl())
}

func statsV1(m *v1.Metrics, at time.Time) *cgroups.Stats {
	s := &cgroups.Stats{Timestamp: at}
	if c := m.GetCPU(); c != nil {
		s.CPU = cgroups.CPUStats{
			UsageNanos:       c.GetUsage().GetTotal(),
			UserNanos:        c.GetUsage().GetUser(),
			SystemNanos:      c.GetUsage().GetKernel(),
			Periods:          c.GetThrottling().GetPeriods(),
			ThrottledPeriods: c.GetThrottling().GetThrottledPeriods(),
			ThrottledNanos:   c.GetThrottling().GetThrottledTime(),
		}
	}
	if mem := m.GetMemory(); mem != nil {
		usage := mem.GetUsage().GetUsage()
		s.Memory = cgroups.MemoryStats{
			Usage:           usage,
			WorkingSet:      subFloor(usage, mem.GetTotalInactiveFile()),
			RSS:             mem.GetTotalRSS(),
			Cache:           mem.GetTotalCache(),
			PageFaults:      mem.GetTotalPgFault(),
			MajorPageFaults: mem.GetTotalPgMajFault(),
			OOMKills:        m.GetMemoryOomControl().GetOomKill(),
		}
		if l := mem.GetUsage().GetLimit(); l < unlimited {
			s.Memory.Limit = l
		}
		// memsw counts memory and swap together.
		s.Memory.Swap = subFloor(mem.GetSwap().GetUsage(), usage)
		s.MemoryDetail = cgroups.MemoryDetail{
			MaxUsage:     mem.GetUsage().GetMax(),
			Failcnt:      mem.GetUsage().GetFailcnt(),
			MappedFile:   mem.GetTotalMappedFile(),
			ActiveFile:   mem.GetTotalActiveFile(),
			InactiveFile: mem.GetTotalInactiveFile(),
			KernelUsage:  mem.GetKernel().GetUsage(),
		}
	}
	if p := m.GetPids(); p != nil {
		s.Pids = cgroups.PidsStats{Current: p.GetCurrent(), Limit: p.GetLimit()}
	}
	return s
}

func statsV2(m *v2.Metrics, at time.Time) *cgroups.Stats {
	s := &cgroups.Stats{Timestamp: at}
	if c := m.GetCPU(); c != nil {
		s.CPU = cgroups.CPUStats{
			UsageNanos:       c.GetUsageUsec() * 1000,
			UserNanos:        c.GetUserUsec() * 1000,
			SystemNanos:      c.GetSystemUsec() * 1000,
			Periods:          c.GetNrPeriods(),
			ThrottledPeriods: c.GetNrThrottled(),
			ThrottledNanos:   c.GetThrottledUsec() * 1000,
		}
	}
	if mem := m.GetMemory(); mem != nil {
		s.Memory = cgroups.MemoryStats{
			Usage:           mem.GetUsage(),
			WorkingSet:      subFloor(mem.GetUsage(), mem.GetInactiveFile()),
			RSS:             mem.GetAnon(),
			Cache:           mem.GetFile(),
			Swap:            mem.GetSwapUsage(),
			PageFaults:      mem.GetPgfault(),
			MajorPageFaults: mem.GetPgmajfault(),
			OOMKills:        m.GetMemoryEvents().GetOomKill(),
		}
		if l := mem.GetUsageLimit(); l < unlimited {
			s.Memory.Limit = l
		}
		s.MemoryDetail = cgroups.MemoryDetail{
			MaxUsage:     mem.GetMaxUsage(),
			Failcnt:      m.GetMemoryEvents().GetMax(),
			MappedFile:   mem.GetFileMapped(),
			ActiveFile:   mem.GetActiveFile(),
			InactiveFile: mem.GetInactiveFile(),
			// v2 metrics carry no "kernel" total: KernelUsage stays 0.
		}
	}
	s.PSI = psi(m)
	if p := m.GetPids(); p != nil {
		s.Pids = cgroups.PidsStats{Current: p.GetCurrent(), Limit: p.GetLimit()}
	}
	return s
}

// psi converts the pressure stall information of v2 metrics; nil when the
// shim sent none (its kernel has no PSI, or the shim predates containerd
// 2.0). The shim reads the kernel's pressure files as they are: totals in
// microseconds.
func psi(m *v2.Metrics) *cgroups.PSIStats {
	line := func(d *v2.PSIData) cgroups.PSILine {
		return cgroups.PSILine{Avg10: d.GetAvg10(), Avg60: d.GetAvg60(), Avg300: d.GetAvg300(), TotalNanos: d.GetTotal() * 1000}
	}
	conv := func(p *v2.PSIStats) *cgroups.PSIResource {
		if p == nil || p.GetSome() == nil {
			return nil
		}
		return &cgroups.PSIResource{Some: line(p.GetSome()), Full: line(p.GetFull())}
	}
	p := &cgroups.PSIStats{
		CPU:    conv(m.GetCPU().GetPSI()),
		Memory: conv(m.GetMemory().GetPSI()),
		IO:     conv(m.GetIo().GetPSI()),
	}
	if p.CPU == nil && p.Memory == nil && p.IO == nil {
		return nil
	}
	return p
}

func subFloor(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
