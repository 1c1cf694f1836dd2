package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/netns"
)

// fakeNetNS pins a "namespace" by creating its file and remembering it as
// mounted, so pods get a sandbox key without root. Its namespaces share
// the host's loopback: Dial dials on the host. Each method can be made to
// fail by its lower-case name.
type fakeNetNS struct {
	mu      sync.Mutex
	calls   []string
	fail    map[string]error
	mounted map[string]bool // by path
	inUse   map[string]bool // by path
}

func newFakeNetNS() *fakeNetNS {
	return &fakeNetNS{fail: map[string]error{}, mounted: map[string]bool{}, inUse: map[string]bool{}}
}

// failOn makes method fail with err (nil: succeed again).
func (f *fakeNetNS) failOn(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

// enter records a call and returns the failure set for method; the
// caller holds f.mu.
func (f *fakeNetNS) enter(method, path string) error {
	f.calls = append(f.calls, method+" "+filepath.Base(path))
	return f.fail[method]
}

// Pin creates the file first and fails after, as the real Pin may.
func (f *fakeNetNS) Pin(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mounted[path] {
		return fmt.Errorf("pin network namespace %s: already mounted", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		return err
	}
	if err := f.enter("pin", path); err != nil {
		return err
	}
	f.mounted[path] = true
	return nil
}

func (f *fakeNetNS) Unmount(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("unmount", path); err != nil {
		return err
	}
	delete(f.mounted, path)
	return nil
}

func (f *fakeNetNS) Remove(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("remove", path); err != nil {
		return err
	}
	delete(f.mounted, path)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (f *fakeNetNS) IsMounted(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mounted[path], f.fail["ismounted"]
}

func (f *fakeNetNS) InUse(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mounted[path] && f.inUse[path], f.fail["inuse"]
}

// List lists the files, as the real List does (it needs no root).
func (f *fakeNetNS) List(dir string) ([]string, error) {
	f.mu.Lock()
	err := f.fail["list"]
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return netns.List(dir)
}

func (f *fakeNetNS) Dial(ctx context.Context, path, address string) (net.Conn, error) {
	f.mu.Lock()
	err := f.enter("dial", path)
	mounted := f.mounted[path]
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !mounted {
		return nil, fmt.Errorf("open network namespace: %s is not pinned", path)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", address)
}

// holding is the number of pinned namespaces.
func (f *fakeNetNS) holding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mounted)
}

// called reports whether call ("remove <base name>") was made.
func (f *fakeNetNS) called(call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c == call {
			return true
		}
	}
	return false
}

// fakeCgroups serves statistics for the cgroup paths it was given; other
// paths are not found.
type fakeCgroups struct {
	mu    sync.Mutex
	stats map[string]*cgroups.Stats // by path
	oom   map[string]uint64
	// limits are the pod cgroups' limits SetLimits wrote, by path;
	// limitErr fails SetLimits.
	limits   map[string]cgroups.Limits
	limitErr error
	// reader, when set, answers Stats, Procs and OOMKills instead (a
	// cgroups.Reader on fixture files).
	reader CgroupReader
}

func newFakeCgroups() *fakeCgroups {
	return &fakeCgroups{stats: map[string]*cgroups.Stats{}, oom: map[string]uint64{}}
}

// set makes path report cpu nanoseconds of CPU time and mem bytes of
// memory now.
func (f *fakeCgroups) set(path string, cpu, mem uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats[path] = &cgroups.Stats{
		Timestamp: time.Now(),
		CPU:       cgroups.CPUStats{UsageNanos: cpu},
		Memory:    cgroups.MemoryStats{Usage: mem, WorkingSet: mem},
		Pids:      cgroups.PidsStats{Current: 1},
	}
}

func (f *fakeCgroups) Stats(path string) (*cgroups.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reader != nil {
		return f.reader.Stats(path)
	}
	st, ok := f.stats[path]
	if !ok {
		return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrNotFound)
	}
	cp := *st
	return &cp, nil
}

// Procs lists pids.current processes of path, none of which exists: they
// count, and have no descriptors.
func (f *fakeCgroups) Procs(path string) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reader != nil {
		return f.reader.Procs(path)
	}
	st, ok := f.stats[path]
	if !ok {
		return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrNotFound)
	}
	pids := make([]int, st.Pids.Current)
	for i := range pids {
		pids[i] = 1<<30 + i
	}
	return pids, nil
}

func (f *fakeCgroups) OOMKills(path string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reader != nil {
		return f.reader.OOMKills(path)
	}
	return f.oom[path], nil
}
