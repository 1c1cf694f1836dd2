package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// newFakeRuntime returns a Runtime whose binaries are placeholders that
// unit tests never run.
func newFakeRuntime(t *testing.T, mutate func(*Config)) *Runtime {
	t.Helper()
	dir := t.TempDir()
	for _, bin := range []string{"runc", "conmon"} {
		if err := os.WriteFile(filepath.Join(dir, bin), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{
		Name:        "fake",
		RuntimePath: filepath.Join(dir, "runc"),
		RuntimeRoot: filepath.Join(dir, "root"),
		ConmonPath:  filepath.Join(dir, "conmon"),
		ExitDir:     filepath.Join(dir, "exits"),
		SocketDir:   filepath.Join(dir, "sockets"),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// writeExitFile writes an exit file the way conmon does
// (g_file_set_contents: a temporary file renamed into place).
func writeExitFile(t *testing.T, dir, id, content string) {
	t.Helper()
	tmp := filepath.Join(dir, id+".ABC123")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, id)); err != nil {
		t.Fatal(err)
	}
}

func TestParseExitCode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		code    int32
		ok      bool
		wantErr bool
	}{
		{in: "0", code: 0, ok: true},
		{in: "3", code: 3, ok: true},
		{in: "137", code: 137, ok: true},
		{in: "-1", code: -1, ok: true}, // conmon's "unknown"
		{in: "143\n", code: 143, ok: true},
		{in: "  2 ", code: 2, ok: true},
		{in: "", ok: false},
		{in: "\n", ok: false},
		{in: "abc", wantErr: true},
		{in: "1.5", wantErr: true},
		{in: "99999999999", wantErr: true},
	} {
		code, ok, err := parseExitCode([]byte(tc.in))
		if (err != nil) != tc.wantErr || ok != tc.ok || code != tc.code {
			t.Errorf("parseExitCode(%q) = (%d, %v, %v), want (%d, %v, err=%v)", tc.in, code, ok, err, tc.code, tc.ok, tc.wantErr)
		}
	}
}

func TestExited(t *testing.T) {
	r := newFakeRuntime(t, nil)
	if _, ok, err := r.Exited("c1"); ok || err != nil {
		t.Fatalf("Exited before the file exists = (%v, %v)", ok, err)
	}
	writeExitFile(t, r.cfg.ExitDir, "c1", "137")
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(r.cfg.ExitDir, "c1"), when, when); err != nil {
		t.Fatal(err)
	}
	st, ok, err := r.Exited("c1")
	if err != nil || !ok || st.Code != 137 || !st.ExitedAt.Equal(when) {
		t.Fatalf("Exited = (%+v, %v, %v), want code 137 at %v", st, ok, err, when)
	}
	writeExitFile(t, r.cfg.ExitDir, "bad", "garbage")
	if _, _, err := r.Exited("bad"); err == nil {
		t.Error("Exited with a malformed file returned no error")
	}
	if _, _, err := r.Exited("../etc"); err == nil {
		t.Error("Exited accepted an ID with a slash")
	}
}

func TestWaitWakesOnExitFile(t *testing.T) {
	// A poll interval longer than the test: only inotify can wake Wait.
	r := newFakeRuntime(t, func(c *Config) { c.ExitPollInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const waiters = 200
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i := range waiters {
		id := "c1"
		if i%2 == 1 {
			id = "c2"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := r.Wait(ctx, id)
			if err == nil && st.Code != map[string]int32{"c1": 3, "c2": 0}[id] {
				err = errors.New("wrong code for " + id)
			}
			errs <- err
		}()
	}
	waitSubscribers(t, r, 2)
	writeExitFile(t, r.cfg.ExitDir, "unrelated", "1")
	writeExitFile(t, r.cfg.ExitDir, "c1", "3")
	writeExitFile(t, r.cfg.ExitDir, "c2", "0")
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := subscriberIDs(r); n != 0 {
		t.Errorf("%d IDs still subscribed after all waiters returned", n)
	}
}

func TestWaitReturnsAtOnceWhenExited(t *testing.T) {
	r := newFakeRuntime(t, nil)
	writeExitFile(t, r.cfg.ExitDir, "done", "5")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := r.Wait(ctx, "done")
	if err != nil || st.Code != 5 {
		t.Fatalf("Wait = (%+v, %v)", st, err)
	}
}

func TestWaitPollFallback(t *testing.T) {
	r := newFakeRuntime(t, func(c *Config) { c.ExitPollInterval = 20 * time.Millisecond })
	// Stop inotify to stand for a lost event; the poll must still find it.
	if err := r.exits.fsw.Remove(r.cfg.ExitDir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.Wait(ctx, "p1")
		done <- err
	}()
	waitSubscribers(t, r, 1)
	writeExitFile(t, r.cfg.ExitDir, "p1", "0")
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func TestWaitContextAndClose(t *testing.T) {
	r := newFakeRuntime(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Wait(ctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after deadline = %v, want DeadlineExceeded", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := r.Wait(context.Background(), "never")
		done <- err
	}()
	waitSubscribers(t, r, 1)
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, errClosed) {
		t.Fatalf("Wait after Close = %v, want errClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func subscriberIDs(r *Runtime) int {
	r.exits.mu.Lock()
	defer r.exits.mu.Unlock()
	return len(r.exits.subs)
}

func waitSubscribers(t *testing.T, r *Runtime, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for subscriberIDs(r) < n {
		if time.Now().After(deadline) {
			t.Fatalf("subscribers for %d IDs never registered", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExitedOOM: the exit status carries conmon's OOM marker, found in
// the bundle that conmon's attach link leads to.
func TestExitedOOM(t *testing.T) {
	r := newFakeRuntime(t, nil)
	bundle := t.TempDir()
	if err := os.Symlink(bundle, filepath.Join(r.cfg.SocketDir, "c1")); err != nil {
		t.Fatal(err)
	}
	writeExitFile(t, r.cfg.ExitDir, "c1", "137")
	if st, ok, err := r.Exited("c1"); err != nil || !ok || st.OOMKilled {
		t.Fatalf("Exited without a marker = %+v, %v, %v; want not OOMKilled", st, ok, err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "oom"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, ok, err := r.Exited("c1"); err != nil || !ok || !st.OOMKilled || st.Code != 137 {
		t.Errorf("Exited with a marker = %+v, %v, %v; want code 137, OOMKilled", st, ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := r.Wait(ctx, "c1"); err != nil || !st.OOMKilled {
		t.Errorf("Wait = %+v, %v; want OOMKilled", st, err)
	}
	// No attach link (an exit file written by hand): no bundle, no OOM.
	writeExitFile(t, r.cfg.ExitDir, "c2", "137")
	if st, ok, err := r.Exited("c2"); err != nil || !ok || st.OOMKilled {
		t.Errorf("Exited without a link = %+v, %v, %v; want not OOMKilled", st, ok, err)
	}
}

// runc's list fails when a container is deleted while it reads the root;
// List tries again, and gives up on other errors at once.
func TestListRetriesVanishedContainer(t *testing.T) {
	r := newFakeRuntime(t, nil)
	count := filepath.Join(t.TempDir(), "count")
	script := `#!/bin/sh
n=$(cat ` + count + ` 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + count + `
case "$FAIL" in
vanish) [ $n -lt 3 ] && { echo 'stat /run/runc/abc: no such file or directory' >&2; exit 1; } ;;
other) echo 'permission denied' >&2; exit 1 ;;
esac
echo '[{"id":"c1","pid":5,"status":"running","bundle":"/b","created":"2026-01-01T00:00:00Z"}]'
`
	if err := os.WriteFile(r.cfg.RuntimePath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAIL", "vanish")
	list, err := r.List(context.Background())
	if err != nil || len(list) != 1 || list[0].ID != "c1" {
		t.Fatalf("List = %+v, %v; want c1 after two vanished-container failures", list, err)
	}
	os.Remove(count)
	t.Setenv("FAIL", "other")
	if _, err := r.List(context.Background()); err == nil {
		t.Fatal("List succeeded on a permission error")
	}
	if b, _ := os.ReadFile(count); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("runtime list run %s times on a permission error, want 1", strings.TrimSpace(string(b)))
	}
}
