package shim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// TestRestoreRecords starts a Runtime on state left by an earlier one
// whose shims are gone, with /bin/true standing in for the shim binary
// (its delete prints nothing and succeeds).
func TestRestoreRecords(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(path string, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(state, podsDir, "corrupt", podFile), `{"version":`)
	write(filepath.Join(state, podsDir, "future", podFile), `{"version":99,"id":"future"}`)
	// A running container whose pod's record (and shim) are gone.
	orphan := containerRecord{Version: recordVersion, ID: "orphan", Pod: "gonepod", Bundle: bundle, Created: time.Now()}
	if err := os.MkdirAll(filepath.Join(state, containersDir, "orphan"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(filepath.Join(state, containersDir, "orphan", containerFile), orphan); err != nil {
		t.Fatal(err)
	}
	// A container that exited before the restart.
	exited := containerRecord{Version: recordVersion, ID: "exited", Pod: "gonepod", Bundle: bundle, Created: time.Now()}
	exitedDir := filepath.Join(state, containersDir, "exited")
	if err := os.MkdirAll(exitedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(filepath.Join(exitedDir, containerFile), exited); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := writeExit(exitedDir, runtime.ExitStatus{Code: 3, ExitedAt: at}); err != nil {
		t.Fatal(err)
	}

	r, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatalf("New with bad records: %v", err)
	}
	defer r.Close()
	ctx := context.Background()

	for _, pod := range []string{"corrupt", "future"} {
		if _, err := os.Stat(filepath.Join(state, podsDir, pod)); !os.IsNotExist(err) {
			t.Errorf("bad record %s not moved away: %v", pod, err)
		}
	}
	if q, _ := os.ReadDir(filepath.Join(state, quarantineDir)); len(q) != 2 {
		t.Errorf("quarantine holds %d records, want 2", len(q))
	}

	if st, ok, err := r.Exited("orphan"); err != nil || !ok || st.Code != 137 {
		t.Errorf("Exited of a container whose shim is gone = %+v, %v, %v; want 137", st, ok, err)
	}
	if st, err := r.State(ctx, "orphan"); err != nil || st.Status != runtime.StatusStopped || st.MonitorPid != 0 {
		t.Errorf("State = %+v, %v", st, err)
	}
	if st, ok, err := r.Exited("exited"); err != nil || !ok || st.Code != 3 || !st.ExitedAt.Equal(at) {
		t.Errorf("Exited of a recorded exit = %+v, %v, %v", st, ok, err)
	}
	if st, err := r.Wait(ctx, "exited"); err != nil || st.Code != 3 {
		t.Errorf("Wait = %+v, %v", st, err)
	}
	if err := r.Start(ctx, "orphan"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Start of a container whose shim is gone = %v, want ErrFailedPrecondition", err)
	}
	for _, id := range []string{"orphan", "exited"} {
		if err := r.Delete(ctx, id); err != nil {
			t.Errorf("Delete %s: %v", id, err)
		}
		if _, err := os.Stat(filepath.Join(state, containersDir, id)); !os.IsNotExist(err) {
			t.Errorf("state of %s left: %v", id, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, eventsSocket)); !os.IsNotExist(err) {
		t.Errorf("events socket left after Close: %v", err)
	}
}

// TestRestoreRemovesIncompleteState starts a Runtime on state left by a
// daemon killed while it made or removed a pod's or a container's
// directory (no record in it, or only the temporary file of one) and
// while a shim binary's delete ran (its working directory): that is
// removed, not quarantined, and nothing is left.
func TestRestoreRemovesIncompleteState(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{
		filepath.Join(state, podsDir, "madepod"),
		filepath.Join(state, containersDir, "madecontainer"),
		filepath.Join(state, containersDir, "removedcontainer"),
		filepath.Join(state, cleanupDirPrefix+"123", "work"),
	} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for path, data := range map[string]string{
		filepath.Join(state, podsDir, "madepod", "."+podFile+".tmp-1"):    `{"version":1,"id":"made`,
		filepath.Join(state, containersDir, "removedcontainer", exitFile): `{"version":1,"code":0}`,
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The link runShimDelete makes to the bundle, which must survive.
	if err := os.Symlink(bundle, filepath.Join(state, cleanupDirPrefix+"123", "id")); err != nil {
		t.Fatal(err)
	}

	r, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer r.Close()
	entries, _ := os.ReadDir(state)
	for _, e := range entries {
		switch e.Name() {
		case podsDir, containersDir, eventsSocket:
		default:
			t.Errorf("left in the state directory: %s", e.Name())
		}
	}
	for _, kind := range []string{podsDir, containersDir} {
		if left, _ := os.ReadDir(filepath.Join(state, kind)); len(left) > 0 {
			t.Errorf("%s left: %v", kind, left)
		}
	}
	if _, err := os.Stat(bundle); err != nil {
		t.Errorf("bundle: %v", err)
	}
	if _, ok, err := r.Exited("removedcontainer"); ok || err != nil {
		t.Errorf("Exited of a removed container = %v, %v", ok, err)
	}
}

func TestNewValidates(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []Config{
		{ShimPath: "/bin/true", StateDir: dir},
		{Name: "x", ShimPath: "true", StateDir: dir},
		{Name: "x", ShimPath: "/bin/true", StateDir: "state"},
		{Name: "x", ShimPath: dir, StateDir: dir},
		{Name: "x", ShimPath: "/bin/true", StateDir: dir, Namespace: "a/b"},
		// The events socket would not fit a socket address.
		{Name: "x", ShimPath: "/bin/true", StateDir: filepath.Join(dir, strings.Repeat("d", 120))},
	} {
		if r, err := New(cfg); err == nil {
			r.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestRestoreOOM: a restarted Runtime reports an OOM kill from the exit
// record, and from the <bundle>/oom marker that older records relied on.
func TestRestoreOOM(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		id, exit string
		marker   bool
	}{
		{"old-marker", `{"version":1,"code":137,"exitedAt":"2026-01-02T03:04:05Z"}`, true},
		{"recorded", `{"version":1,"code":137,"exitedAt":"2026-01-02T03:04:05Z","oomKilled":true}`, false},
		{"plain", `{"version":1,"code":137,"exitedAt":"2026-01-02T03:04:05Z"}`, false},
	} {
		bundle := filepath.Join(dir, "bundle-"+c.id)
		cdir := filepath.Join(state, containersDir, c.id)
		for _, d := range []string{bundle, cdir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if c.marker {
			if err := os.WriteFile(filepath.Join(bundle, runtime.OOMMarker), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		rec := containerRecord{Version: recordVersion, ID: c.id, Pod: "gonepod", Bundle: bundle, Created: at}
		if err := writeRecord(filepath.Join(cdir, containerFile), rec); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cdir, exitFile), []byte(c.exit), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for id, want := range map[string]bool{"old-marker": true, "recorded": true, "plain": false} {
		if st, ok, err := r.Exited(id); err != nil || !ok || st.OOMKilled != want || st.Code != 137 {
			t.Errorf("Exited(%s) = %+v, %v, %v; want code 137, OOMKilled %v", id, st, ok, err, want)
		}
	}
	for _, id := range []string{"old-marker", "recorded", "plain"} {
		if err := r.Delete(context.Background(), id); err != nil {
			t.Errorf("Delete %s: %v", id, err)
		}
	}
}
