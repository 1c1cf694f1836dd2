package cgroups

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestReadControl(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, 70000} {
		want := bytes.Repeat([]byte("x"), size)
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readControl(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("size %d: read %d bytes, %v", size, len(got), err)
		}
	}
	if _, err := readControl(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := readControl(dir); err == nil {
		t.Fatal("reading a directory succeeded")
	}
	// A real cgroup file, where the host has one.
	if b, err := readControl("/sys/fs/cgroup/memory/memory.stat"); err == nil && !bytes.Contains(b, []byte("cache ")) {
		t.Fatalf("memory.stat: %q", b)
	}
}
