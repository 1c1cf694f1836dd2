package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

const podPath = "/kubepods/pod123"

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// v1PodTree is a pod cgroup in the cpu, cpuacct, memory and hugetlb v1
// hierarchies, as the kernel shows a fresh one.
func v1PodTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	p := podPath[1:]
	writeTree(t, root, map[string]string{
		"cpu/cgroup.procs":     "1\n",
		"cpuacct/cgroup.procs": "1\n",
		"memory/cgroup.procs":  "1\n",
		"hugetlb/cgroup.procs": "1\n",

		"cpu/" + p + "/cpu.shares":                     "1024\n",
		"cpu/" + p + "/cpu.cfs_quota_us":               "-1\n",
		"cpu/" + p + "/cpu.cfs_period_us":              "100000\n",
		"cpuacct/" + p + "/cpuacct.usage":              "0\n",
		"memory/" + p + "/memory.limit_in_bytes":       "9223372036854771712\n",
		"memory/" + p + "/memory.usage_in_bytes":       "52428800\n",
		"hugetlb/" + p + "/hugetlb.2MB.limit_in_bytes": "9223372036854771712\n",
	})
	return root
}

func TestSetLimitsV1(t *testing.T) {
	root := v1PodTree(t)
	r := mustNew(t, root)
	restore, err := r.SetLimits(podPath, Limits{
		CPUShares: 512, CPUQuota: 150000, CPUPeriod: 50000, MemoryLimit: 256 << 20,
		Hugepages: map[string]uint64{"2MB": 4 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := podPath[1:]
	for file, want := range map[string]string{
		"cpu/" + p + "/cpu.shares":                     "512",
		"cpu/" + p + "/cpu.cfs_quota_us":               "150000",
		"cpu/" + p + "/cpu.cfs_period_us":              "50000",
		"memory/" + p + "/memory.limit_in_bytes":       "268435456",
		"hugetlb/" + p + "/hugetlb.2MB.limit_in_bytes": "4194304",
	} {
		if got := readTrim(t, filepath.Join(root, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// restore puts back what was there; an unlimited v1 limit as -1.
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu/" + p + "/cpu.shares":                     "1024",
		"cpu/" + p + "/cpu.cfs_quota_us":               "-1",
		"cpu/" + p + "/cpu.cfs_period_us":              "100000",
		"memory/" + p + "/memory.limit_in_bytes":       "-1",
		"hugetlb/" + p + "/hugetlb.2MB.limit_in_bytes": "-1",
	} {
		if got := readTrim(t, filepath.Join(root, file)); got != want {
			t.Errorf("after restore: %s = %q, want %q", file, got, want)
		}
	}

	// Only the fields set are written.
	if _, err := r.SetLimits(podPath, Limits{CPUQuota: -1}); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, "cpu", p, "cpu.shares")); got != "1024" {
		t.Errorf("cpu.shares = %q after a quota-only update", got)
	}
}

func TestSetLimitsV1Refusals(t *testing.T) {
	root := v1PodTree(t)
	r := mustNew(t, root)
	p := podPath[1:]
	for _, tc := range []struct {
		name  string
		path  string
		l     Limits
		class error
	}{
		{"below usage", podPath, Limits{CPUShares: 2, MemoryLimit: 10 << 20}, errdefs.ErrFailedPrecondition},
		{"unified on v1", podPath, Limits{Unified: map[string]string{"memory.high": "1"}}, errdefs.ErrInvalidArgument},
		{"missing cgroup", "/kubepods/nope", Limits{CPUShares: 2}, errdefs.ErrNotFound},
		{"root", "/", Limits{CPUShares: 2}, errdefs.ErrInvalidArgument},
		{"unknown page size", podPath, Limits{CPUShares: 2, Hugepages: map[string]uint64{"1GB": 1 << 30}}, errdefs.ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.SetLimits(tc.path, tc.l)
			if !errors.Is(err, tc.class) {
				t.Fatalf("SetLimits = %v, want %v", err, tc.class)
			}
			if got := readTrim(t, filepath.Join(root, "cpu", p, "cpu.shares")); got != "1024" {
				t.Errorf("cpu.shares = %q after a refused update", got)
			}
		})
	}
	if _, err := r.SetLimits(podPath, Limits{MemoryLimit: 10 << 20}); err == nil || !strings.Contains(err.Error(), "below the current usage of 52428800 bytes") {
		t.Errorf("below usage: %v, want the usage named", err)
	}
}

// A write the kernel refuses half way undoes the writes before it.
func TestSetLimitsRollsBackOnFailure(t *testing.T) {
	// A directory in place of the control file: root writes read-only
	// files, so a mode would not make it fail.
	root := v1PodTree(t)
	r := mustNew(t, root)
	p := podPath[1:]
	mem := filepath.Join(root, "memory", p, "memory.limit_in_bytes")
	if err := os.Remove(mem); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mem, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := r.SetLimits(podPath, Limits{CPUShares: 512, CPUQuota: 20000, MemoryLimit: 256 << 20})
	if err == nil {
		t.Fatal("SetLimits succeeded with an unwritable memory limit")
	}
	for file, want := range map[string]string{"cpu.shares": "1024", "cpu.cfs_quota_us": "-1"} {
		if got := readTrim(t, filepath.Join(root, "cpu", p, file)); got != want {
			t.Errorf("%s = %q after a failed update, want %q", file, got, want)
		}
	}
}

func TestSetLimitsV2(t *testing.T) {
	root := v2Tree(t)
	p := podPath[1:]
	writeTree(t, root, map[string]string{
		p + "/cgroup.procs":           "",
		p + "/cpu.weight":             "100\n",
		p + "/cpu.max":                "max 100000\n",
		p + "/memory.max":             "max\n",
		p + "/memory.current":         "8388608\n",
		p + "/memory.high":            "max\n",
		p + "/hugetlb.2MB.max":        "max\n",
		p + "/cgroup.subtree_control": "",
	})
	r := mustNew(t, root)
	restore, err := r.SetLimits(podPath, Limits{
		CPUShares: 1024, CPUQuota: 50000, MemoryLimit: 128 << 20,
		Hugepages: map[string]uint64{"2MB": 2 << 20},
		Unified:   map[string]string{"memory.high": "100000000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu.weight": "39", "cpu.max": "50000 100000", "memory.max": "134217728",
		"hugetlb.2MB.max": "2097152", "memory.high": "100000000",
	} {
		if got := readTrim(t, filepath.Join(root, p, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// The period alone keeps the quota; no limit is "max".
	if _, err := r.SetLimits(podPath, Limits{CPUPeriod: 20000, MemoryLimit: -1}); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, p, "cpu.max")); got != "50000 20000" {
		t.Errorf("cpu.max = %q", got)
	}
	if got := readTrim(t, filepath.Join(root, p, "memory.max")); got != "max" {
		t.Errorf("memory.max = %q", got)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, p, "cpu.max")); got != "max 100000" {
		t.Errorf("cpu.max after restore = %q", got)
	}

	for name, l := range map[string]Limits{
		"below usage":      {MemoryLimit: 6 << 20},
		"not a file":       {Unified: map[string]string{"../cpu.max": "1"}},
		"cgroup core file": {Unified: map[string]string{"cgroup.procs": "1"}},
		"not enabled":      {Unified: map[string]string{"io.max": "1"}},
	} {
		if _, err := r.SetLimits(podPath, l); err == nil {
			t.Errorf("%s: SetLimits succeeded", name)
		}
	}
}

func TestSharesToWeight(t *testing.T) {
	for shares, want := range map[uint64]uint64{0: 0, 2: 1, 1024: 39, 262144: 10000, 1: 1, 1 << 20: 10000} {
		if got := SharesToWeight(shares); got != want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", shares, got, want)
		}
	}
}
