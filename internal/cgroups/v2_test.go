package cgroups

import (
	"errors"
	"io/fs"
	"math"
	"slices"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

var v2Container = containerPath[1:]

func TestStatsV2(t *testing.T) {
	r := mustNew(t, v2Tree(t))
	if r.Mode() != V2 {
		t.Fatalf("Mode = %v, want v2", r.Mode())
	}
	s := mustStats(t, r, containerPath)
	wantCPU := CPUStats{
		UsageNanos:       2406817000,
		UserNanos:        1812345000,
		SystemNanos:      594472000,
		Periods:          345,
		ThrottledPeriods: 12,
		ThrottledNanos:   1523012000,
	}
	if s.CPU != wantCPU {
		t.Errorf("CPU = %+v\nwant  %+v", s.CPU, wantCPU)
	}
	wantMem := MemoryStats{
		Usage:           5660672,
		WorkingSet:      5660672 - 1449984, // memory.current − inactive_file
		RSS:             1232896,
		Cache:           2641920,
		Swap:            8192,
		Limit:           268435456,
		PageFaults:      2547,
		MajorPageFaults: 12,
		OOMKills:        1,
	}
	if s.Memory != wantMem {
		t.Errorf("Memory = %+v\nwant     %+v", s.Memory, wantMem)
	}
	if want := (PidsStats{Current: 3}); s.Pids != want {
		t.Errorf("Pids = %+v, want %+v", s.Pids, want)
	}
}

func TestStatsV2EdgeCases(t *testing.T) {
	dir := v2Container
	for _, tc := range []struct {
		name   string
		edit   func(t *testing.T, root string)
		check  func(t *testing.T, s *Stats)
		errIs  error
		failed bool
	}{
		{
			name: "memory and pids controllers not enabled, no CPU quota",
			edit: func(t *testing.T, root string) {
				remove(t, root, dir+"/memory.current", dir+"/memory.max", dir+"/memory.swap.current",
					dir+"/memory.swap.max", dir+"/memory.stat", dir+"/memory.events", dir+"/pids.current", dir+"/pids.max")
				writeTree(t, root, map[string]string{dir + "/cpu.stat": "usage_usec 10\nuser_usec 6\nsystem_usec 4\nnice_usec 0\n"})
			},
			check: func(t *testing.T, s *Stats) {
				want := CPUStats{UsageNanos: 10000, UserNanos: 6000, SystemNanos: 4000}
				if s.CPU != want || s.Memory != (MemoryStats{}) || s.Pids != (PidsStats{}) {
					t.Errorf("Stats = %+v", s)
				}
			},
		},
		{
			name: "unlimited memory, no swap accounting, no memory.events",
			edit: func(t *testing.T, root string) {
				remove(t, root, dir+"/memory.swap.current", dir+"/memory.events")
				writeTree(t, root, map[string]string{dir + "/memory.max": "max\n"})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Memory.Limit != 0 || s.Memory.Swap != 0 || s.Memory.OOMKills != 0 || s.Memory.Usage != 5660672 {
					t.Errorf("Memory = %+v", s.Memory)
				}
			},
		},
		{
			name: "pids limit",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{dir + "/pids.max": "4096\n"})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Pids != (PidsStats{Current: 3, Limit: 4096}) {
					t.Errorf("Pids = %+v", s.Pids)
				}
			},
		},
		{
			name: "huge counters saturate",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{
					dir + "/cpu.stat":       "usage_usec 18446744073709551615\nuser_usec 18446744073709551\nsystem_usec 0\n",
					dir + "/memory.current": "18446744073709551615\n",
				})
			},
			check: func(t *testing.T, s *Stats) {
				if s.CPU.UsageNanos != math.MaxUint64 || s.CPU.UserNanos != 18446744073709551000 {
					t.Errorf("CPU = %+v", s.CPU)
				}
				if s.Memory.Usage != math.MaxUint64 || s.Memory.WorkingSet != math.MaxUint64-1449984 {
					t.Errorf("Memory = %+v", s.Memory)
				}
			},
		},
		{
			name: "a transiently negative memory.stat entry reads as 0",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{dir + "/memory.stat": "anon 4096\ninactive_file -4096\nfile 0\n"})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Memory.WorkingSet != s.Memory.Usage || s.Memory.RSS != 4096 {
					t.Errorf("Memory = %+v", s.Memory)
				}
			},
		},
		{
			name:   "cgroup gone",
			edit:   func(t *testing.T, root string) { removeAll(t, root, dir) },
			failed: true, errIs: errdefs.ErrNotFound,
		},
		{
			name:   "cpu.stat missing from a cgroup that exists",
			edit:   func(t *testing.T, root string) { remove(t, root, dir+"/cpu.stat") },
			failed: true, errIs: fs.ErrNotExist,
		},
		{
			name:   "memory.stat missing beside memory.current",
			edit:   func(t *testing.T, root string) { remove(t, root, dir+"/memory.stat") },
			failed: true, errIs: fs.ErrNotExist,
		},
		{
			name: "garbage in memory.max",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{dir + "/memory.max": "unlimited\n"})
			},
			failed: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := v2Tree(t)
			tc.edit(t, root)
			s, err := mustNew(t, root).Stats(containerPath)
			if tc.failed {
				if err == nil {
					t.Fatalf("Stats succeeded: %+v", s)
				}
				if tc.errIs != nil && !errors.Is(err, tc.errIs) {
					t.Fatalf("Stats error %v, want %v", err, tc.errIs)
				}
				if tc.errIs != errdefs.ErrNotFound && errdefs.IsNotFound(err) {
					t.Fatalf("Stats error %v is classified not found", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			tc.check(t, s)
		})
	}
}

func TestStatsV2RootCgroup(t *testing.T) {
	s := mustStats(t, mustNew(t, v2Tree(t)), "/")
	// The root has cpu.stat and memory.stat but no memory.current.
	if s.CPU.UsageNanos != 1939761461000 || s.Memory != (MemoryStats{}) {
		t.Errorf("root cgroup: %+v", s)
	}
}

func TestProcsAndOOMKillsV2(t *testing.T) {
	root := v2Tree(t)
	r := mustNew(t, root)
	if pids, err := r.Procs(containerPath); err != nil || !slices.Equal(pids, []int{4242}) {
		t.Errorf("Procs = %v, %v", pids, err)
	}
	if n, err := r.OOMKills(containerPath); err != nil || n == 0 {
		t.Errorf("OOMKills = %v, %v; want > 0", n, err)
	}
	writeTree(t, root, map[string]string{v2Container + "/memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"})
	if n, err := r.OOMKills(containerPath); err != nil || n != 0 {
		t.Errorf("OOMKills = %v, %v; want 0", n, err)
	}
	remove(t, root, v2Container+"/memory.events")
	if n, err := r.OOMKills(containerPath); err != nil || n != 0 {
		t.Errorf("OOMKills without a memory controller = %v, %v; want 0", n, err)
	}
	removeAll(t, root, v2Container)
	if _, err := r.Procs(containerPath); !errdefs.IsNotFound(err) {
		t.Errorf("Procs of a removed cgroup = %v, want ErrNotFound", err)
	}
	if _, err := r.OOMKills(containerPath); !errdefs.IsNotFound(err) {
		t.Errorf("OOMKills of a removed cgroup = %v, want ErrNotFound", err)
	}
}
