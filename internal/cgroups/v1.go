package cgroups

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// userHZ is the unit of cpuacct.stat: the kernel reports USER_HZ ticks to
// userspace, 100 a second on every architecture Kubernetes runs on.
const userHZ = 100

// statsV1 reads a cgroup from the v1 hierarchies. The cgroup must exist in
// the cpuacct and memory hierarchies that are mounted; the cpu and pids
// ones, and blkio, are read where the cgroup exists in them.
func (r *Reader) statsV1(rel string) (*Stats, error) {
	cpuacct, hasCPUAcct := r.v1[ctrlCPUAcct]
	memory, hasMemory := r.v1[ctrlMemory]
	if hasCPUAcct {
		cpuacct = filepath.Join(cpuacct, rel)
		if err := requireDir(cpuacct); err != nil {
			return nil, err
		}
	}
	if hasMemory {
		memory = filepath.Join(memory, rel)
		if err := requireDir(memory); err != nil {
			return nil, err
		}
	}

	s := &Stats{Timestamp: time.Now()}
	if hasCPUAcct {
		if err := readCPUAcctV1(cpuacct, &s.CPU); err != nil {
			return nil, err
		}
	}
	if dir, ok := r.optionalDir(ctrlCPU, rel); ok {
		if err := readThrottlingV1(dir, &s.CPU); err != nil {
			return nil, err
		}
	}
	if hasMemory {
		if err := readMemoryV1(memory, &s.Memory, &s.MemoryDetail); err != nil {
			return nil, err
		}
	}
	if dir, ok := r.pressureDirV1(rel); ok {
		p, err := readPSI(dir)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		s.PSI = p
	}
	if dir, ok := r.optionalDir(ctrlPids, rel); ok {
		if err := readPids(dir, &s.Pids); err != nil {
			return nil, err
		}
	}
	if dir, ok := r.optionalDir(ctrlBlkio, rel); ok {
		io, err := readIOV1(dir)
		if err != nil {
			return nil, err
		}
		s.IO = io
	}
	return s, nil
}

// optionalDir returns the cgroup's directory in ctrl's hierarchy, if both
// exist.
func (r *Reader) optionalDir(ctrl, rel string) (string, bool) {
	root, ok := r.v1[ctrl]
	if !ok {
		return "", false
	}
	dir := filepath.Join(root, rel)
	return dir, exists(dir)
}

func readCPUAcctV1(dir string, cpu *CPUStats) error {
	b, err := readFile(dir, "cpuacct.usage")
	if err != nil {
		return err
	}
	if cpu.UsageNanos, err = parseSingle("cpuacct.usage", b); err != nil {
		return err
	}
	// cpuacct.usage_user and _sys (Linux 4.7+) are in nanoseconds;
	// cpuacct.stat is in coarser ticks.
	user, err := readOptional(dir, "cpuacct.usage_user")
	if err != nil {
		return err
	}
	sys, err := readOptional(dir, "cpuacct.usage_sys")
	if err != nil {
		return err
	}
	if user != nil && sys != nil {
		if cpu.UserNanos, err = parseSingle("cpuacct.usage_user", user); err != nil {
			return err
		}
		cpu.SystemNanos, err = parseSingle("cpuacct.usage_sys", sys)
		return err
	}
	b, err = readOptional(dir, "cpuacct.stat")
	if err != nil || b == nil {
		return err
	}
	m := parseKeyed(b)
	cpu.UserNanos = mulSat(m["user"], uint64(time.Second/userHZ))
	cpu.SystemNanos = mulSat(m["system"], uint64(time.Second/userHZ))
	return nil
}

func readThrottlingV1(dir string, cpu *CPUStats) error {
	b, err := readOptional(dir, "cpu.stat")
	if err != nil || b == nil {
		return err
	}
	m := parseKeyed(b)
	cpu.Periods = m["nr_periods"]
	cpu.ThrottledPeriods = m["nr_throttled"]
	cpu.ThrottledNanos = m["throttled_time"]
	return nil
}

// readMemoryV1 reads the v1 memory controller. The total_ entries of
// memory.stat include descendant cgroups, like usage_in_bytes does (the
// hierarchy is always on in current kernels); the local entries are the
// fallback for a kernel that prints no totals.
func readMemoryV1(dir string, mem *MemoryStats, detail *MemoryDetail) error {
	b, err := readFile(dir, "memory.usage_in_bytes")
	if err != nil {
		return err
	}
	if mem.Usage, err = parseSingle("memory.usage_in_bytes", b); err != nil {
		return err
	}
	if b, err = readFile(dir, "memory.stat"); err != nil {
		return err
	}
	m := parseKeyed(b)
	mem.WorkingSet = subFloor(mem.Usage, firstKey(m, "total_inactive_file", "inactive_file"))
	mem.RSS = firstKey(m, "total_rss", "rss")
	mem.Cache = firstKey(m, "total_cache", "cache")
	mem.Swap = firstKey(m, "total_swap", "swap")
	mem.PageFaults = firstKey(m, "total_pgfault", "pgfault")
	mem.MajorPageFaults = firstKey(m, "total_pgmajfault", "pgmajfault")
	if err := memoryDetailV1(dir, m, detail); err != nil {
		return err
	}

	if b, err = readOptional(dir, "memory.limit_in_bytes"); err != nil {
		return err
	}
	if b != nil {
		if mem.Limit, err = parseLimit("memory.limit_in_bytes", b); err != nil {
			return err
		}
	}
	mem.OOMKills, err = oomKillsV1(dir)
	return err
}

// oomKillsV1 reads the oom_kill counter of memory.oom_control, which Linux
// 4.13 added; older kernels read as 0.
func oomKillsV1(dir string) (uint64, error) {
	b, err := readOptional(dir, "memory.oom_control")
	if err != nil || b == nil {
		return 0, err
	}
	return parseKeyed(b)["oom_kill"], nil
}

// readPids reads pids.current and pids.max, which v1 and v2 share. Both are
// optional: the root cgroup has neither.
func readPids(dir string, pids *PidsStats) error {
	b, err := readOptional(dir, "pids.current")
	if err != nil {
		return err
	}
	if b != nil {
		if pids.Current, err = parseSingle("pids.current", b); err != nil {
			return err
		}
	}
	if b, err = readOptional(dir, "pids.max"); err != nil || b == nil {
		return err
	}
	pids.Limit, err = parseLimit("pids.max", b)
	return err
}
