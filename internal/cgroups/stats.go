package cgroups

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Stats is one sample of a cgroup's resource usage. Counters are
// cumulative since the cgroup was created. A controller that is not mounted
// (v1) or not enabled for the cgroup (v2) leaves its fields zero.
type Stats struct {
	// Timestamp is when the CPU counters were read; UsageNanoCores
	// divides by the time between two samples' timestamps.
	Timestamp time.Time
	CPU       CPUStats
	Memory    MemoryStats
	Pids      PidsStats
	// MemoryDetail is the finer cAdvisor numbers that
	// ListPodSandboxMetrics reports and the CRI stats messages do not.
	MemoryDetail MemoryDetail
	// PSI is the cgroup's pressure stall information: cgroup v2 only (on
	// a v1 hybrid host, read from the cgroup2 mount at <root>/unified
	// where the runtime made the same cgroup there); nil where the kernel
	// exposes none.
	PSI *PSIStats
	// IO is the block I/O of the cgroup and its descendants, by device
	// (v1 blkio throttle counters, v2 io.stat); nil where the blkio or io
	// controller is not there. On cgroup v1 the kernel counts only I/O
	// that passed blk-throttle: with no throttle limit on the device
	// anywhere above the cgroup, the counters stay 0.
	IO []DeviceIO
}

// CPUStats is CPU time in nanoseconds, and CFS throttling.
type CPUStats struct {
	// UsageNanos is the cumulative CPU time of all tasks in the cgroup
	// (CRI usage_core_nano_seconds).
	UsageNanos  uint64
	UserNanos   uint64
	SystemNanos uint64
	// Periods is the number of CFS enforcement periods that elapsed,
	// ThrottledPeriods those in which the cgroup hit its quota, and
	// ThrottledNanos the total time its tasks were throttled. Zero
	// without a CPU quota.
	Periods          uint64
	ThrottledPeriods uint64
	ThrottledNanos   uint64
}

// MemoryStats is memory usage in bytes, as cAdvisor and the kubelet compute
// it.
type MemoryStats struct {
	// Usage is all memory charged to the cgroup, page cache included
	// (v1 memory.usage_in_bytes, v2 memory.current).
	Usage uint64
	// WorkingSet is Usage less inactive file pages, floored at 0: what
	// the kubelet evicts on (CRI working_set_bytes).
	WorkingSet uint64
	// RSS is anonymous memory (v1 total_rss, v2 anon).
	RSS uint64
	// Cache is page cache (v1 total_cache, v2 file).
	Cache uint64
	// Swap is swap in use (v1 total_swap where swap is accounted, v2
	// memory.swap.current).
	Swap uint64
	// Limit is the cgroup's own memory limit; 0 when unlimited.
	Limit uint64
	// PageFaults and MajorPageFaults count faults by the cgroup's tasks.
	PageFaults      uint64
	MajorPageFaults uint64
	// OOMKills counts processes the OOM killer killed in the cgroup.
	OOMKills uint64
}

// Available is what the cgroup may still use before it hits its limit
// (CRI available_bytes): Limit less WorkingSet, floored at 0; 0 when there
// is no limit.
func (m MemoryStats) Available() uint64 {
	if m.Limit == 0 {
		return 0
	}
	return subFloor(m.Limit, m.WorkingSet)
}

// PidsStats counts tasks.
type PidsStats struct {
	Current uint64
	// Limit is pids.max; 0 when unlimited.
	Limit uint64
}

// Stats reads the cgroup at path, relative to the hierarchy roots (for
// example /kubepods/pod123/podbay-<id>; "/" is the root cgroup). A missing
// cgroup, including one removed while it was being read, is an error
// wrapping errdefs.ErrNotFound.
func (r *Reader) Stats(path string) (*Stats, error) {
	rel, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	var s *Stats
	if r.mode == V2 {
		s, err = r.statsV2(rel)
	} else {
		s, err = r.statsV1(rel)
	}
	if err != nil {
		return nil, fmt.Errorf("read stats of cgroup %s: %w", path, err)
	}
	return s, nil
}

// UsageNanoCores is the CPU rate between two samples of one cgroup, in
// nanoseconds of CPU time per second (CRI usage_nano_cores: 1e9 is one
// core busy). It is 0 without an earlier sample, when time did not advance,
// or when the counter went backwards (the cgroup was recreated).
func UsageNanoCores(prev, cur *Stats) uint64 {
	if prev == nil || cur == nil {
		return 0
	}
	dt := cur.Timestamp.Sub(prev.Timestamp)
	if dt <= 0 || cur.CPU.UsageNanos < prev.CPU.UsageNanos {
		return 0
	}
	du := cur.CPU.UsageNanos - prev.CPU.UsageNanos
	// du * 1e9 overflows uint64 past 18 s of CPU time; keep 128 bits.
	hi, lo := bits.Mul64(du, uint64(time.Second))
	if hi >= uint64(dt) {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, uint64(dt))
	return q
}
