package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// TestHostSetLimitsV1 writes a real v1 pod cgroup with a child: the kernel
// takes the values, refuses a quota below the child's (classified, and the
// earlier writes undone), and a restore writes back what was there.
func TestHostSetLimitsV1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	r, err := New(DefaultRoot)
	if err != nil || r.Mode() != V1 || r.v1[ctrlCPU] == "" || r.v1[ctrlMemory] == "" {
		t.Skip("no cgroup v1 cpu and memory hierarchies")
	}
	pod := "/podbay-limitstest-" + randomHex(t)
	var dirs []string
	for _, ctrl := range []string{ctrlCPU, ctrlMemory} {
		for _, d := range []string{pod, pod + "/child"} {
			dir := filepath.Join(r.v1[ctrl], d)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, dir)
		}
	}
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			rmdirCgroup(t, dirs[i])
		}
	})
	read := func(ctrl, d, file string) string {
		b, err := os.ReadFile(filepath.Join(r.v1[ctrl], d, file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b[:len(b)-1])
	}
	if err := os.WriteFile(filepath.Join(r.v1[ctrlCPU], pod, "child", "cpu.cfs_quota_us"), []byte("50000"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := r.SetLimits(pod, Limits{CPUShares: 256, CPUQuota: 100000, CPUPeriod: 100000, MemoryLimit: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ctrl, file, want string }{
		{ctrlCPU, "cpu.shares", "256"}, {ctrlCPU, "cpu.cfs_quota_us", "100000"},
		{ctrlMemory, "memory.limit_in_bytes", strconv.Itoa(64 << 20)},
	} {
		if got := read(c.ctrl, pod, c.file); got != c.want {
			t.Errorf("%s = %s, want %s", c.file, got, c.want)
		}
	}

	// Below the child's 0.5 CPU: the kernel's EINVAL, and cpu.shares,
	// written before, is back at 256.
	_, err = r.SetLimits(pod, Limits{CPUShares: 512, CPUQuota: 20000})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("quota below the child's: %v, want ErrFailedPrecondition", err)
	}
	if got := read(ctrlCPU, pod, "cpu.shares"); got != "256" {
		t.Errorf("cpu.shares %s after a refused update, want 256", got)
	}
	if got := read(ctrlCPU, pod, "cpu.cfs_quota_us"); got != "100000" {
		t.Errorf("cpu.cfs_quota_us %s after a refused update, want 100000", got)
	}
	// No limit is -1; restore puts the limit back.
	restore, err := r.SetLimits(pod, Limits{MemoryLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(ctrlMemory, pod, "memory.limit_in_bytes"); got == strconv.Itoa(64<<20) {
		t.Errorf("memory limit still %s after -1", got)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if got := read(ctrlMemory, pod, "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Errorf("memory limit after restore %s", got)
	}
}
