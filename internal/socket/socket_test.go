package socket

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestListenSocketMode: the CRI socket is never reachable with the mode
// the umask gives (a umask of 0 would make it 0777 between bind and
// chmod): it appears at its path already 0660, replaces a stale file, and
// is removed when the listener closes.
func TestListenSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "podbay.sock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket %v, want a socket with mode 0660", fi.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("socket dir holds %d entries, want the socket only", len(ents))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket after Close: %v", err)
	}
}
