package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestOpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "podbay.db")
	if _, err := OpenReadOnly(path, 50*time.Millisecond); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing database: err = %v, want ErrNotExist", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("OpenReadOnly of a missing database made %v", entries)
	}

	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("sandboxes", "a", 1, rec{"a"}); err != nil {
		t.Fatal(err)
	}
	// The writer holds bbolt's exclusive lock: a reader waits, then fails.
	start := time.Now()
	if _, err := OpenReadOnly(path, 100*time.Millisecond); !errors.Is(err, ErrHeld) {
		t.Fatalf("held database: err = %v, want ErrHeld", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("OpenReadOnly waited %v for a 100ms timeout", d)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ro.Keys("sandboxes")
	if err != nil || !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("Keys = %v, %v", keys, err)
	}
	// Two readers at once: both take the shared lock.
	ro2, err := OpenReadOnly(path, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	ro2.Close()
	if err := ro.Put("sandboxes", "b", 1, rec{"b"}); err == nil {
		t.Fatal("Put on a read-only database succeeded")
	}
	ro.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Fatal("a read-only open changed the database file")
	}
}

func TestOpenReadOnlyGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.db")
	if err := os.WriteFile(path, []byte("this is not a bbolt database, not at all, no"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(path, 100*time.Millisecond); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}
