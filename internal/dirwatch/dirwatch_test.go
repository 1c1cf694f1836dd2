package dirwatch

import (
	"os"
	"path/filepath"
	"testing"
)

func TestChanged(t *testing.T) {
	base := t.TempDir()
	present := filepath.Join(base, "present")
	missing := filepath.Join(base, "missing")
	if err := os.Mkdir(present, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New([]string{present, missing})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	step := func(name string, want bool) {
		t.Helper()
		if got := w.Changed(); got != want {
			t.Fatalf("%s: Changed() = %v, want %v", name, got, want)
		}
	}
	step("nothing done", false)

	f := filepath.Join(present, "a.json")
	if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	step("file written", true)
	step("drained", false)

	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	step("file chmod", true)

	// Renamed in from outside the watched directories: only the target
	// directory sees it (IN_MOVED_TO).
	tmp := filepath.Join(base, "tmp.json")
	if err := os.WriteFile(tmp, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	step("outside write", false)
	if err := os.Rename(tmp, filepath.Join(present, "b.json")); err != nil {
		t.Fatal(err)
	}
	step("renamed in", true)

	if err := os.Mkdir(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	step("missing dir appeared", true)
	if got := w.Watched(); len(got) != 2 {
		t.Fatalf("Watched() = %v, want both", got)
	}
	step("drained", false)

	if err := os.RemoveAll(present); err != nil {
		t.Fatal(err)
	}
	step("dir removed", true)
	if got := w.Watched(); len(got) != 1 || got[0] != missing {
		t.Fatalf("Watched() = %v, want [%s]", got, missing)
	}
	step("still missing", false)
	if err := os.Mkdir(present, 0o755); err != nil {
		t.Fatal(err)
	}
	step("dir re-created", true)
	if err := os.WriteFile(filepath.Join(present, "c.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	step("file in re-created dir", true)

	moved := filepath.Join(base, "moved")
	if err := os.Rename(missing, moved); err != nil {
		t.Fatal(err)
	}
	step("dir moved away", true)
	if err := os.WriteFile(filepath.Join(moved, "d.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	step("write in the moved-away dir", false)

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	step("closed", false)
}

func TestSameDirTwice(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	w, err := New([]string{dir, link})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !w.Changed() {
		t.Fatal("a write was not seen")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if !w.Changed() {
		t.Fatal("the removal was not seen")
	}
	if got := w.Watched(); len(got) != 0 {
		t.Fatalf("Watched() = %v after the directory was removed", got)
	}
}

func TestBlindWatcherAlwaysChanged(t *testing.T) {
	w := &Watcher{fd: -1, blind: true}
	for i := 0; i < 2; i++ {
		if !w.Changed() {
			t.Fatalf("call %d: a watcher without inotify must report a change every time", i)
		}
	}
	w.Close()
	if w.Changed() {
		t.Fatal("a closed watcher reported a change")
	}
}
