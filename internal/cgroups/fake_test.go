package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

// writeTree writes files (path relative to root → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
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

const containerPath = "/kubepods/pod123/podbay-abc"

// v1MemoryStat is memory.stat of a container cgroup on Linux 6.x with
// cgroup v1 (see Documentation/admin-guide/cgroup-v1/memory.rst, 5.2).
const v1MemoryStat = `cache 3649536
rss 1613824
rss_huge 0
shmem 0
mapped_file 2162688
dirty 0
writeback 0
workingset_refault_anon 0
workingset_refault_file 0
swap 0
swapcached 0
pgpgin 2181
pgpgout 896
pgfault 2871
pgmajfault 9
inactive_anon 1609728
active_anon 4096
inactive_file 2297856
active_file 1351680
unevictable 0
hierarchical_memory_limit 268435456
hierarchical_memsw_limit 9223372036854771712
total_cache 3649536
total_rss 1613824
total_rss_huge 0
total_shmem 0
total_mapped_file 2162688
total_dirty 0
total_writeback 0
total_workingset_refault_anon 0
total_workingset_refault_file 0
total_swap 8192
total_swapcached 0
total_pgpgin 2181
total_pgpgout 896
total_pgfault 2871
total_pgmajfault 9
total_inactive_anon 1609728
total_active_anon 4096
total_inactive_file 2297856
total_active_file 1351680
total_unevictable 0
`

// v1Tree is a container's cgroup on a host laid out like this one: cpu and
// cpuacct mounted apart, a named systemd hierarchy, and a cgroup2 mount at
// unified that only holds hugetlb (hybrid).
func v1Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"unified/cgroup.controllers":   "hugetlb\n",
		"unified/cgroup.procs":         "1\n",
		"systemd/cgroup.procs":         "1\n",
		"cpuset/cgroup.procs":          "1\n",
		"cpu/cgroup.procs":             "1\n",
		"cpuacct/cgroup.procs":         "1\n",
		"memory/cgroup.procs":          "1\n",
		"pids/cgroup.procs":            "1\n",
		"memory/memory.usage_in_bytes": "1431478272\n",
		"memory/memory.limit_in_bytes": "9223372036854771712\n",

		"cpu" + containerPath + "/cgroup.procs":                  "4242\n4250\n",
		"cpu" + containerPath + "/cpu.cfs_quota_us":              "50000\n",
		"cpu" + containerPath + "/cpu.stat":                      "nr_periods 345\nnr_throttled 12\nthrottled_time 1523012345\nnr_bursts 0\nburst_time 0\n",
		"cpuacct" + containerPath + "/cgroup.procs":              "4242\n4250\n",
		"cpuacct" + containerPath + "/cpuacct.usage":             "2406817443\n",
		"cpuacct" + containerPath + "/cpuacct.usage_user":        "1812345678\n",
		"cpuacct" + containerPath + "/cpuacct.usage_sys":         "594471765\n",
		"cpuacct" + containerPath + "/cpuacct.stat":              "user 181\nsystem 59\n",
		"memory" + containerPath + "/cgroup.procs":               "4242\n4250\n",
		"memory" + containerPath + "/memory.usage_in_bytes":      "5660672\n",
		"memory" + containerPath + "/memory.limit_in_bytes":      "268435456\n",
		"memory" + containerPath + "/memory.stat":                v1MemoryStat,
		"memory" + containerPath + "/memory.oom_control":         "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"pids" + containerPath + "/cgroup.procs":                 "4242\n4250\n",
		"pids" + containerPath + "/pids.current":                 "3\n",
		"pids" + containerPath + "/pids.max":                     "1024\n",
		"unified" + containerPath + "/cgroup.procs":              "4242\n4250\n",
		"unified" + containerPath + "/hugetlb.2MB.current":       "0\n",
		"systemd" + containerPath + "/cgroup.procs":              "4242\n4250\n",
		"cpuset" + containerPath + "/cgroup.procs":               "4242\n4250\n",
		"cpuset" + containerPath + "/cpuset.cpus":                "0-1\n",
		"memory" + containerPath + "/memory.kmem.usage_in_bytes": "450560\n",
	}
	writeTree(t, root, files)
	return root
}

// v2MemoryStat is memory.stat of a container cgroup on Linux 6.x (see
// Documentation/admin-guide/cgroup-v2.rst, "memory.stat").
const v2MemoryStat = `anon 1232896
file 2641920
kernel 593920
kernel_stack 32768
pagetables 81920
sec_pagetables 0
percpu 0
sock 0
vmalloc 0
shmem 0
zswap 0
zswapped 0
file_mapped 1757184
file_dirty 0
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon 1224704
active_anon 8192
inactive_file 1449984
active_file 1191936
unevictable 0
slab_reclaimable 192584
slab_unreclaimable 212816
slab 405400
workingset_refault_anon 0
workingset_refault_file 0
workingset_activate_anon 0
workingset_activate_file 0
workingset_restore_anon 0
workingset_restore_file 0
workingset_nodereclaim 0
pgscan 0
pgsteal 0
pgscan_kswapd 0
pgscan_direct 0
pgscan_khugepaged 0
pgsteal_kswapd 0
pgsteal_direct 0
pgsteal_khugepaged 0
pgfault 2547
pgmajfault 12
pgrefill 0
pgactivate 2
pgdeactivate 0
pglazyfree 0
pglazyfreed 0
thp_fault_alloc 0
thp_collapse_alloc 0
`

// v2Tree is a container's cgroup on a unified host with cpu, memory and
// pids enabled down to it.
func v2Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory hugetlb pids rdma misc\n",
		"cgroup.subtree_control": "cpuset cpu io memory pids\n",
		"cgroup.procs":           "1\n",
		"cpu.stat":               "usage_usec 1939761461\nuser_usec 1445682847\nsystem_usec 494078614\nnice_usec 0\n",
		"memory.stat":            v2MemoryStat,

		containerPath[1:] + "/cgroup.procs":        "4242\n",
		containerPath[1:] + "/cgroup.controllers":  "cpu memory pids\n",
		containerPath[1:] + "/cpu.stat":            "usage_usec 2406817\nuser_usec 1812345\nsystem_usec 594472\nnice_usec 0\ncore_sched.force_idle_usec 0\nnr_periods 345\nnr_throttled 12\nthrottled_usec 1523012\nnr_bursts 0\nburst_usec 0\n",
		containerPath[1:] + "/memory.current":      "5660672\n",
		containerPath[1:] + "/memory.max":          "268435456\n",
		containerPath[1:] + "/memory.swap.current": "8192\n",
		containerPath[1:] + "/memory.swap.max":     "max\n",
		containerPath[1:] + "/memory.stat":         v2MemoryStat,
		containerPath[1:] + "/memory.events":       "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
		containerPath[1:] + "/pids.current":        "3\n",
		containerPath[1:] + "/pids.max":            "max\n",
	})
	return root
}
