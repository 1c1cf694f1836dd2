package cgroups

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// TestHostCgroup reads a real cgroup that holds a busy process: on the
// host's own layout, and on a hybrid host's cgroup2 mount as well, which
// exercises the v2 reader against the kernel even where v1 rules.
func TestHostCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh to run a busy loop in")
	}
	roots := []string{DefaultRoot}
	var st unix.Statfs_t
	unified := filepath.Join(DefaultRoot, "unified")
	if err := unix.Statfs(unified, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		roots = append(roots, unified)
	}
	for _, root := range roots {
		t.Run(filepath.Base(root), func(t *testing.T) { testHostCgroup(t, root) })
	}
}

func testHostCgroup(t *testing.T, root string) {
	r, err := New(root)
	if err != nil {
		t.Skipf("no cgroups at %s: %v", root, err)
	}
	name := "/podbay-cgtest-" + randomHex(t)
	t.Logf("%s layout at %s, cgroup %s", r.Mode(), root, name)

	// The cgroup's directory in every hierarchy the reader uses.
	var dirs []string
	if r.Mode() == V2 {
		dirs = []string{filepath.Join(root, name)}
	} else {
		for _, ctrl := range []string{ctrlCPU, ctrlCPUAcct, ctrlMemory, ctrlPids} {
			if h, ok := r.v1[ctrl]; ok {
				dirs = append(dirs, filepath.Join(h, name))
			}
		}
		dirs = slices.Compact(dirs) // co-mounted controllers share one
	}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rmdirCgroup(t, dir) })
	}

	// The shell waits on stdin until it is in the cgroup, then execs the
	// busy loop: the exec's fresh pages are charged to the new memory
	// cgroup (v1 does not move old charges with a process).
	cmd := exec.Command("/bin/sh", "-c", "read x; exec /bin/sh -c 'while :; do :; done'")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := unix.Kill(pid, unix.SIGKILL); err != nil {
			t.Errorf("kill %d: %v", pid, err)
		}
		_ = cmd.Wait() // reaps it; the error is the SIGKILL
	}
	t.Cleanup(stop) // runs before the rmdirs, registered earlier
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("move %d into %s: %v", pid, dir, err)
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	stdin.Close()

	time.Sleep(100 * time.Millisecond)
	first, err := r.Stats(name)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	second, err := r.Stats(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first  %+v", *first)
	t.Logf("second %+v", *second)

	if second.CPU.UsageNanos <= first.CPU.UsageNanos {
		t.Errorf("CPU usage did not grow: %d then %d", first.CPU.UsageNanos, second.CPU.UsageNanos)
	}
	if second.CPU.UserNanos+second.CPU.SystemNanos == 0 {
		t.Error("no user or system CPU time")
	}
	rate := UsageNanoCores(first, second)
	t.Logf("usage_nano_cores %d", rate)
	// One busy process uses at most one core, give or take the clock.
	if rate == 0 || rate > uint64(time.Second)*3/2 {
		t.Errorf("UsageNanoCores = %d, want in (0, 1.5e9]", rate)
	}
	hasMemory := r.Mode() == V1 || exists(filepath.Join(root, name, "memory.current"))
	if hasMemory {
		if second.Memory.Usage == 0 || second.Memory.WorkingSet > second.Memory.Usage {
			t.Errorf("Memory = %+v, want usage > 0 and working set ≤ usage", second.Memory)
		}
	} else if second.Memory != (MemoryStats{}) {
		t.Errorf("Memory = %+v without a memory controller", second.Memory)
	}
	hasPids := (r.Mode() == V1 && r.v1[ctrlPids] != "") || exists(filepath.Join(root, name, "pids.current"))
	if hasPids && second.Pids.Current < 1 {
		t.Errorf("Pids = %+v, want at least the busy process", second.Pids)
	}
	if pids, err := r.Procs(name); err != nil || !slices.Contains(pids, pid) {
		t.Errorf("Procs = %v, %v; want %d among them", pids, err, pid)
	}
	if n, err := r.OOMKills(name); err != nil || n != 0 {
		t.Errorf("OOMKills = %v, %v; want 0", n, err)
	}

	// Once the process is gone and the cgroup removed, reads say not found.
	stop()
	for _, dir := range dirs {
		rmdirCgroup(t, dir)
	}
	if _, err := r.Stats(name); !errdefs.IsNotFound(err) {
		t.Errorf("Stats of the removed cgroup = %v, want ErrNotFound", err)
	}
}

// rmdirCgroup removes a cgroup directory (rmdir, the only way: its files
// cannot be unlinked). The kernel may report it busy for a moment after
// its last task died.
func rmdirCgroup(t *testing.T, dir string) {
	t.Helper()
	for range 100 {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return
		}
		if !errors.Is(err, unix.EBUSY) {
			t.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("remove cgroup %s: still busy", dir)
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
