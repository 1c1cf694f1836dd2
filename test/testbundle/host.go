package testbundle

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/runtime"
)

// The helpers below are the host side of the runtime handlers'
// integration tests: what they need to run, and the checks that nothing
// is left behind.

var idCounter atomic.Int64

// Host skips t unless it runs as root and each of bins exists, and returns
// a temporary directory holding a copy of the busybox binary at busybox:
// Write links it into every bundle's /bin, so it must be on the bundles'
// filesystem.
func Host(t *testing.T, busybox string, bins ...string) (dir, busyboxCopy string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration test needs root")
	}
	for _, bin := range append([]string{busybox}, bins...) {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("integration test needs %s", bin)
		}
	}
	dir = t.TempDir()
	busyboxCopy = filepath.Join(dir, "busybox")
	if err := CopyFile(busybox, busyboxCopy); err != nil {
		t.Fatal(err)
	}
	return dir, busyboxCopy
}

// Open opens a runtime handler with open and closes it at the end of t.
func Open[R io.Closer](t *testing.T, open func() (R, error)) R {
	t.Helper()
	r, err := open()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// NewID returns a container ID unique to this test process: prefix, the
// pid, a counter and name. Leak checks look for it on command lines and
// in cgroup paths, so they only see what this process's tests started.
func NewID(prefix, name string) string {
	return fmt.Sprintf("%s-%d-%d-%s", prefix, os.Getpid(), idCounter.Add(1), name)
}

// Create creates a container with r and fails t unless r returns its pid.
func Create(ctx context.Context, t *testing.T, r runtime.Runtime, opts runtime.CreateOptions) int {
	t.Helper()
	pid, err := r.Create(ctx, opts)
	if err != nil {
		t.Fatalf("Create %s: %v", opts.ID, err)
	}
	if pid <= 0 {
		t.Fatalf("Create %s returned pid %d", opts.ID, pid)
	}
	return pid
}

// ProcessesOf lists the live processes, other than this one, that have id
// on their command line or in their cgroup path. A zombie has exited and
// does not count.
func ProcessesOf(id string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() || IsZombie(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		cgroup, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		if strings.Contains(string(cmdline), id) || strings.Contains(string(cgroup), "/"+id+"\n") {
			found = append(found, fmt.Sprintf("%d:%s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return found
}

// IsZombie reports whether pid has exited but is not reaped yet.
func IsZombie(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.Zombie()
}

// RemoveCgroup removes path from every mounted hierarchy, ignoring ones
// where it is missing or still in use (another test process).
func RemoveCgroup(t *testing.T, path string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	mounts, err := cgroups.ParseMounts(f)
	if err != nil {
		t.Error(err)
		return
	}
	for _, m := range mounts {
		_ = os.Remove(filepath.Join(m.Dir, path))
	}
}

// CopyFile copies src to dst, an executable file.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// WaitFor polls cond until it holds or d has passed, and returns its last
// value.
func WaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Context returns a context for t's calls that ends after timeout, or
// with t.
func Context(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// DeleteAll deletes ids in order with a runtime handler opened by open,
// as a restarted daemon would, then closes it. Failures are reported to t.
func DeleteAll[R interface {
	runtime.Runtime
	io.Closer
}](t *testing.T, open func() (R, error), ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := open()
	if err != nil {
		t.Errorf("cleanup: New: %v", err)
		return
	}
	for _, id := range ids {
		if err := r.Delete(ctx, id); err != nil {
			t.Errorf("cleanup: Delete %s: %v", id, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Errorf("cleanup: Close: %v", err)
	}
}

// CheckNoProcesses fails t when processes of id (ProcessesOf) are still
// there after up to 5 s: an exited monitor may be on its way out.
func CheckNoProcesses(t *testing.T, id string) {
	t.Helper()
	var procs []string
	WaitFor(5*time.Second, func() bool {
		procs = ProcessesOf(id)
		return len(procs) == 0
	})
	if len(procs) > 0 {
		t.Errorf("processes left for %s: %q", id, procs)
	}
}
