package oci

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestProcessTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 100 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tree := processTree(cmd.Process.Pid)
		var child []byte
		if len(tree) == 2 && tree[0] == cmd.Process.Pid {
			// The shell's child until it has exec'd sleep.
			child, _ = os.ReadFile("/proc/" + strconv.Itoa(tree[1]) + "/cmdline")
			if strings.HasPrefix(string(child), "sleep") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree of %d: %v (child %q)", cmd.Process.Pid, tree, child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fixRestoredCgroup writes the restored processes into the bundle's
// cgroup on a v2 host (a fake hierarchy here), and does nothing when they
// are there already.
func TestFixRestoredCgroup(t *testing.T) {
	own, err := unifiedCgroup(os.Getpid())
	if err != nil {
		t.Skipf("no cgroup v2 path: %v", err)
	}
	root := t.TempDir()
	old := cgroupV2Root
	cgroupV2Root = root
	t.Cleanup(func() { cgroupV2Root = old })
	bundle := t.TempDir()
	writeSpec := func(path string) {
		spec := specs.Spec{Version: specs.Version, Linux: &specs.Linux{CgroupsPath: path}}
		b, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Not a v2 host: nothing.
	writeSpec("/elsewhere")
	if err := fixRestoredCgroup(bundle, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Already in the cgroup: nothing moved.
	writeSpec(own)
	if err := fixRestoredCgroup(bundle, os.Getpid()); err != nil {
		t.Fatalf("in place: %v", err)
	}
	// Elsewhere: the pid is written to the cgroup's procs; a fake
	// hierarchy never moves it, so the passes give up with an error.
	if err := os.MkdirAll(filepath.Join(root, "target"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec("/target")
	err = fixRestoredCgroup(bundle, os.Getpid())
	b, _ := os.ReadFile(filepath.Join(root, "target", "cgroup.procs"))
	if err == nil || !slices.Contains(strings.Fields(string(b)), strconv.Itoa(os.Getpid())) {
		t.Fatalf("move: %v, procs %q", err, b)
	}
	// A systemd cgroup (slice:prefix:name) is its scope's directory
	// under the expanded slice.
	scope := filepath.Join(root, "system.slice", "podbay-x.scope")
	if err := os.MkdirAll(scope, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec("system.slice:podbay:x")
	err = fixRestoredCgroup(bundle, os.Getpid())
	b, _ = os.ReadFile(filepath.Join(scope, "cgroup.procs"))
	if err == nil || !slices.Contains(strings.Fields(string(b)), strconv.Itoa(os.Getpid())) {
		t.Fatalf("move into scope: %v, procs %q", err, b)
	}
}
