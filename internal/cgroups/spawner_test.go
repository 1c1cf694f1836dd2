package cgroups

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestSpawner starts processes through a Spawner on the host's real
// cgroups and checks that each is in the spawner's cgroup in every
// hierarchy (v1 and v2) from the start, while the rest of the test
// process stays where it was.
func TestSpawner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep to start")
	}
	path := "/podbay-spawntest-" + randomHex(t)
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSpawner(path)
	if err != nil {
		t.Fatalf("NewSpawner: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		if err := Remove(context.Background(), path); err != nil {
			t.Errorf("remove %s: %v", path, err)
		}
	})

	const n = 8
	cmds := make([]*exec.Cmd, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cmds {
		cmds[i] = exec.Command("sleep", "30")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Start(cmds[i])
		}()
	}
	wg.Wait()
	for i, cmd := range cmds {
		if errs[i] != nil {
			t.Fatalf("Start: %v", errs[i])
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	for _, cmd := range cmds {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		for _, line := range lines {
			// hierarchy-ID:controllers:path
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 || f[2] != path {
				t.Errorf("pid %d: %q, want every hierarchy at %s:\n%s", cmd.Process.Pid, line, path, data)
			}
		}
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("the test process moved:\nbefore %s\nafter %s", before, after)
	}

	s.Close()
	for _, m := range mustMounts(t) {
		procs, err := os.ReadFile(m.Dir + path + "/cgroup.procs")
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(strings.Fields(string(procs)), strconv.Itoa(os.Getpid())) {
			t.Errorf("%s%s still holds the test process after Close", m.Dir, path)
		}
	}
	if err := s.Start(exec.Command("sleep", "30")); !errors.Is(err, ErrSpawnerClosed) {
		t.Errorf("Start after Close: %v, want ErrSpawnerClosed", err)
	}
}

func TestSpawnerRejectsRoot(t *testing.T) {
	for _, p := range []string{"/", ""} {
		if s, err := NewSpawner(p); err == nil {
			s.Close()
			t.Errorf("NewSpawner(%q) accepted the root cgroup", p)
		}
	}
}

func mustMounts(t *testing.T) []Mount {
	t.Helper()
	mounts, err := selfMounts()
	if err != nil {
		t.Fatal(err)
	}
	return mounts
}
