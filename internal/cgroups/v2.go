package cgroups

import (
	"path/filepath"
	"time"
)

// statsV2 reads a cgroup of the unified hierarchy. cpu.stat is a core file
// that every cgroup has (Linux 4.15+); the memory and pids files exist only
// where the parent enabled those controllers in cgroup.subtree_control.
func (r *Reader) statsV2(rel string) (*Stats, error) {
	dir := filepath.Join(r.root, rel)
	if err := requireDir(dir); err != nil {
		return nil, err
	}
	s := &Stats{Timestamp: time.Now()}
	if err := readCPUV2(dir, &s.CPU); err != nil {
		return nil, err
	}
	if err := readMemoryV2(dir, &s.Memory, &s.MemoryDetail); err != nil {
		return nil, err
	}
	p, err := readPSI(dir)
	if err != nil {
		return nil, err
	}
	s.PSI = p
	if err := readPids(dir, &s.Pids); err != nil {
		return nil, err
	}
	if s.IO, err = readIOV2(dir); err != nil {
		return nil, err
	}
	return s, nil
}

func readCPUV2(dir string, cpu *CPUStats) error {
	b, err := readFile(dir, "cpu.stat")
	if err != nil {
		return err
	}
	m := parseKeyed(b)
	usec := uint64(time.Microsecond)
	cpu.UsageNanos = mulSat(m["usage_usec"], usec)
	cpu.UserNanos = mulSat(m["user_usec"], usec)
	cpu.SystemNanos = mulSat(m["system_usec"], usec)
	cpu.Periods = m["nr_periods"]
	cpu.ThrottledPeriods = m["nr_throttled"]
	cpu.ThrottledNanos = mulSat(m["throttled_usec"], usec)
	return nil
}

// readMemoryV2 reads the memory controller; without memory.current (the
// controller is not enabled, or this is the root cgroup) the fields stay 0.
func readMemoryV2(dir string, mem *MemoryStats, detail *MemoryDetail) error {
	b, err := readOptional(dir, "memory.current")
	if err != nil || b == nil {
		return err
	}
	if mem.Usage, err = parseSingle("memory.current", b); err != nil {
		return err
	}
	if b, err = readFile(dir, "memory.stat"); err != nil {
		return err
	}
	m := parseKeyed(b)
	mem.WorkingSet = subFloor(mem.Usage, m["inactive_file"])
	mem.RSS = m["anon"]
	mem.Cache = m["file"]
	mem.PageFaults = m["pgfault"]
	mem.MajorPageFaults = m["pgmajfault"]
	if err := memoryDetailV2(dir, m, detail); err != nil {
		return err
	}

	if b, err = readOptional(dir, "memory.max"); err != nil {
		return err
	}
	if b != nil {
		if mem.Limit, err = parseLimit("memory.max", b); err != nil {
			return err
		}
	}
	// memory.swap.current exists only with swap accounting.
	if b, err = readOptional(dir, "memory.swap.current"); err != nil {
		return err
	}
	if b != nil {
		if mem.Swap, err = parseSingle("memory.swap.current", b); err != nil {
			return err
		}
	}
	mem.OOMKills, err = oomKillsV2(dir)
	return err
}

// oomKillsV2 reads oom_kill from memory.events, which counts kills in
// descendant cgroups too unless cgroup2 is mounted with memory_localevents.
func oomKillsV2(dir string) (uint64, error) {
	b, err := readOptional(dir, "memory.events")
	if err != nil || b == nil {
		return 0, err
	}
	return parseKeyed(b)["oom_kill"], nil
}
