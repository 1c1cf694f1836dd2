package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

func mustNew(t *testing.T, root string) *Reader {
	t.Helper()
	r, err := New(root)
	if err != nil {
		t.Fatalf("New(%s): %v", root, err)
	}
	return r
}

func mustStats(t *testing.T, r *Reader, path string) *Stats {
	t.Helper()
	before := time.Now()
	s, err := r.Stats(path)
	if err != nil {
		t.Fatalf("Stats(%s): %v", path, err)
	}
	if s.Timestamp.Before(before) || s.Timestamp.After(time.Now()) {
		t.Errorf("Timestamp %v is not the time of the read", s.Timestamp)
	}
	return s
}

func TestStatsV1(t *testing.T) {
	r := mustNew(t, v1Tree(t))
	if r.Mode() != V1 {
		t.Fatalf("Mode = %v, want v1 (hybrid)", r.Mode())
	}
	s := mustStats(t, r, containerPath)
	wantCPU := CPUStats{
		UsageNanos:       2406817443,
		UserNanos:        1812345678,
		SystemNanos:      594471765,
		Periods:          345,
		ThrottledPeriods: 12,
		ThrottledNanos:   1523012345,
	}
	if s.CPU != wantCPU {
		t.Errorf("CPU = %+v\nwant  %+v", s.CPU, wantCPU)
	}
	wantMem := MemoryStats{
		Usage:           5660672,
		WorkingSet:      5660672 - 2297856, // usage − total_inactive_file
		RSS:             1613824,
		Cache:           3649536,
		Swap:            8192,
		Limit:           268435456,
		PageFaults:      2871,
		MajorPageFaults: 9,
	}
	if s.Memory != wantMem {
		t.Errorf("Memory = %+v\nwant     %+v", s.Memory, wantMem)
	}
	if want := (PidsStats{Current: 3, Limit: 1024}); s.Pids != want {
		t.Errorf("Pids = %+v, want %+v", s.Pids, want)
	}
	if got := s.Memory.Available(); got != 268435456-(5660672-2297856) {
		t.Errorf("Available = %d", got)
	}
}

func TestStatsV1EdgeCases(t *testing.T) {
	cpuacct := "cpuacct" + containerPath
	memory := "memory" + containerPath
	for _, tc := range []struct {
		name   string
		edit   func(t *testing.T, root string)
		check  func(t *testing.T, s *Stats)
		errIs  error // when Stats must fail: the class, or nil for any error
		failed bool
	}{
		{
			name: "user and system from cpuacct.stat ticks on kernels before 4.7",
			edit: func(t *testing.T, root string) {
				remove(t, root, cpuacct+"/cpuacct.usage_user", cpuacct+"/cpuacct.usage_sys")
			},
			check: func(t *testing.T, s *Stats) {
				if s.CPU.UserNanos != 1810000000 || s.CPU.SystemNanos != 590000000 {
					t.Errorf("user, system = %d, %d; want 1.81 s, 0.59 s", s.CPU.UserNanos, s.CPU.SystemNanos)
				}
			},
		},
		{
			name: "no user/system split at all",
			edit: func(t *testing.T, root string) {
				remove(t, root, cpuacct+"/cpuacct.usage_user", cpuacct+"/cpuacct.stat")
			},
			check: func(t *testing.T, s *Stats) {
				if s.CPU.UsageNanos != 2406817443 || s.CPU.UserNanos != 0 || s.CPU.SystemNanos != 0 {
					t.Errorf("CPU = %+v", s.CPU)
				}
			},
		},
		{
			name: "unlimited memory and pids, no swap accounting",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{
					memory + "/memory.limit_in_bytes":    "9223372036854771712\n",
					"pids" + containerPath + "/pids.max": "max\n",
					memory + "/memory.stat":              "total_rss 1\ntotal_inactive_file 2\n",
				})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Memory.Limit != 0 || s.Pids.Limit != 0 || s.Memory.Swap != 0 || s.Memory.Available() != 0 {
					t.Errorf("Memory = %+v, Pids = %+v", s.Memory, s.Pids)
				}
			},
		},
		{
			name: "inactive file above usage floors the working set at 0",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{memory + "/memory.usage_in_bytes": "1048576\n"})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Memory.WorkingSet != 0 {
					t.Errorf("WorkingSet = %d, want 0", s.Memory.WorkingSet)
				}
			},
		},
		{
			name: "local memory.stat entries without totals",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{
					memory + "/memory.stat": "cache 300\nrss 200\ninactive_file 100\npgfault 7\npgmajfault 1\n",
				})
			},
			check: func(t *testing.T, s *Stats) {
				m := s.Memory
				if m.WorkingSet != 5660672-100 || m.RSS != 200 || m.Cache != 300 || m.PageFaults != 7 || m.MajorPageFaults != 1 {
					t.Errorf("Memory = %+v", m)
				}
			},
		},
		{
			name: "OOM kill counted",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{memory + "/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Memory.OOMKills != 2 {
					t.Errorf("OOMKills = %d, want 2", s.Memory.OOMKills)
				}
			},
		},
		{
			name: "kernel before 4.13 has no oom_kill counter",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{memory + "/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"})
			},
			check: func(t *testing.T, s *Stats) {
				if s.Memory.OOMKills != 0 {
					t.Errorf("OOMKills = %d", s.Memory.OOMKills)
				}
			},
		},
		{
			name: "cgroup missing from the pids and cpu hierarchies",
			edit: func(t *testing.T, root string) {
				removeAll(t, root, "pids/kubepods", "cpu/kubepods")
			},
			check: func(t *testing.T, s *Stats) {
				if s.Pids != (PidsStats{}) || s.CPU.Periods != 0 || s.CPU.UsageNanos != 2406817443 {
					t.Errorf("Pids = %+v, CPU = %+v", s.Pids, s.CPU)
				}
			},
		},
		{
			name: "huge counters",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{
					cpuacct + "/cpuacct.usage":      "18446744073709551615\n",
					cpuacct + "/cpuacct.usage_user": "18446744073709551616\n",
					cpuacct + "/cpuacct.usage_sys":  "0\n",
				})
			},
			check: func(t *testing.T, s *Stats) {
				if s.CPU.UsageNanos != 1<<64-1 || s.CPU.UserNanos != 1<<64-1 {
					t.Errorf("CPU = %+v", s.CPU)
				}
			},
		},
		{
			name:   "cgroup gone",
			edit:   func(t *testing.T, root string) { removeAll(t, root, "cpuacct/kubepods", "memory/kubepods") },
			failed: true, errIs: errdefs.ErrNotFound,
		},
		{
			name:   "cgroup gone from memory only",
			edit:   func(t *testing.T, root string) { removeAll(t, root, memory) },
			failed: true, errIs: errdefs.ErrNotFound,
		},
		{
			name:   "cpuacct.usage missing from a cgroup that exists",
			edit:   func(t *testing.T, root string) { remove(t, root, cpuacct+"/cpuacct.usage") },
			failed: true, errIs: fs.ErrNotExist,
		},
		{
			name:   "memory.stat missing from a cgroup that exists",
			edit:   func(t *testing.T, root string) { remove(t, root, memory+"/memory.stat") },
			failed: true, errIs: fs.ErrNotExist,
		},
		{
			name: "garbage in memory.usage_in_bytes",
			edit: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{memory + "/memory.usage_in_bytes": "lots\n"})
			},
			failed: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := v1Tree(t)
			tc.edit(t, root)
			r := mustNew(t, root)
			s, err := r.Stats(containerPath)
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

func TestProcsAndOOMKillsV1(t *testing.T) {
	root := v1Tree(t)
	r := mustNew(t, root)
	pids, err := r.Procs(containerPath)
	if err != nil || !slices.Equal(pids, []int{4242, 4250}) {
		t.Errorf("Procs = %v, %v", pids, err)
	}
	if n, err := r.OOMKills(containerPath); err != nil || n != 0 {
		t.Errorf("OOMKills = %v, %v; want 0", n, err)
	}
	writeTree(t, root, map[string]string{
		"memory" + containerPath + "/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
	})
	if n, err := r.OOMKills(containerPath); err != nil || n != 1 {
		t.Errorf("OOMKills = %v, %v; want 1", n, err)
	}

	for _, p := range []string{"/kubepods/pod123/podbay-gone", "/nope"} {
		if _, err := r.Procs(p); !errdefs.IsNotFound(err) {
			t.Errorf("Procs(%s) = %v, want ErrNotFound", p, err)
		}
		if _, err := r.OOMKills(p); !errdefs.IsNotFound(err) {
			t.Errorf("OOMKills(%s) = %v, want ErrNotFound", p, err)
		}
		if _, err := r.Stats(p); !errdefs.IsNotFound(err) {
			t.Errorf("Stats(%s) = %v, want ErrNotFound", p, err)
		}
	}
	for _, call := range []func() error{
		func() error { _, err := r.Stats(""); return err },
		func() error { _, err := r.Procs(""); return err },
		func() error { _, err := r.OOMKills(""); return err },
	} {
		if err := call(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("empty path: %v, want ErrInvalidArgument", err)
		}
	}
}

func TestStatsV1RootCgroup(t *testing.T) {
	root := v1Tree(t)
	writeTree(t, root, map[string]string{
		"cpuacct/cpuacct.usage": "1992038413872\n",
		"memory/memory.stat":    v1MemoryStat,
	})
	s := mustStats(t, mustNew(t, root), "/")
	if s.CPU.UsageNanos != 1992038413872 || s.Memory.Usage != 1431478272 || s.Memory.Limit != 0 {
		t.Errorf("root cgroup: CPU %+v Memory %+v", s.CPU, s.Memory)
	}
	// The root pids cgroup has neither pids.current nor pids.max.
	if s.Pids != (PidsStats{}) {
		t.Errorf("Pids = %+v", s.Pids)
	}
}

func TestNewDetectsLayout(t *testing.T) {
	coMounted := func(symlinks bool) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			writeTree(t, root, map[string]string{
				"cpu,cpuacct/cgroup.procs":                          "1\n",
				"cpu,cpuacct" + containerPath + "/cpuacct.usage":    "77\n",
				"cpu,cpuacct" + containerPath + "/cpu.stat":         "nr_periods 5\nnr_throttled 1\nthrottled_time 9\n",
				"memory/cgroup.procs":                               "1\n",
				"memory" + containerPath + "/memory.usage_in_bytes": "100\n",
				"memory" + containerPath + "/memory.stat":           "total_inactive_file 40\n",
			})
			if symlinks {
				for _, l := range []string{"cpu", "cpuacct"} {
					if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	for _, tc := range []struct {
		name    string
		build   func(t *testing.T, root string)
		want    Mode
		wantErr bool
		check   func(t *testing.T, r *Reader)
	}{
		{
			name: "unified",
			build: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{"cgroup.controllers": "cpu memory pids\n"})
			},
			want: V2,
		},
		{
			name: "co-mounted cpu,cpuacct with symlinks", build: coMounted(true), want: V1,
			check: func(t *testing.T, r *Reader) {
				s, err := r.Stats(containerPath)
				if err != nil {
					t.Fatal(err)
				}
				if s.CPU.UsageNanos != 77 || s.CPU.ThrottledNanos != 9 || s.Memory.WorkingSet != 60 {
					t.Errorf("Stats = %+v", s)
				}
			},
		},
		{
			name: "co-mounted cpu,cpuacct without symlinks", build: coMounted(false), want: V1,
			check: func(t *testing.T, r *Reader) {
				if r.v1[ctrlCPUAcct] != r.v1[ctrlCPU] || filepath.Base(r.v1[ctrlCPU]) != "cpu,cpuacct" {
					t.Errorf("hierarchies = %v", r.v1)
				}
			},
		},
		{
			name: "memory only",
			build: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{
					"memory/cgroup.procs": "1\n",
					"cpuacct/README":      "an empty mount point, not a hierarchy\n",
				})
			},
			want: V1,
			check: func(t *testing.T, r *Reader) {
				if _, ok := r.v1[ctrlCPUAcct]; ok || len(r.v1) != 1 {
					t.Errorf("hierarchies = %v", r.v1)
				}
			},
		},
		{
			name: "hybrid with only the cgroup2 mount populated",
			build: func(t *testing.T, root string) {
				writeTree(t, root, map[string]string{"unified/cgroup.controllers": "\n", "pids/cgroup.procs": "1\n"})
			},
			wantErr: true,
		},
		{name: "empty", build: func(*testing.T, string) {}, wantErr: true},
		{
			name:    "no such root",
			build:   func(t *testing.T, root string) { removeAll(t, root, ".") },
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "cgroup")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.build(t, root)
			r, err := New(root)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("New succeeded with mode %v", r.Mode())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Mode() != tc.want {
				t.Errorf("Mode = %v, want %v", r.Mode(), tc.want)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{V1: "v1", V2: "v2", 0: "Mode(0)"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(m), got, want)
		}
	}
}

func remove(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.Remove(filepath.Join(root, n)); err != nil {
			t.Fatal(err)
		}
	}
}

func removeAll(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(root, n)); err != nil {
			t.Fatal(err)
		}
	}
}
