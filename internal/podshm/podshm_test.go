package podshm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOptions(t *testing.T) {
	if got, want := Options(DefaultSize), "mode=1777,size=65536k"; got != want {
		t.Fatalf("Options(DefaultSize) = %q, want %q (containerd's)", got, want)
	}
}

func TestMountUnmountRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	root := filepath.Join(t.TempDir(), "shm")
	dir := Dir(root, "abc")
	if err := Mount(dir, DefaultSize); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Remove(dir) })
	if m, err := IsMounted(dir); err != nil || !m {
		t.Fatalf("IsMounted after Mount = %v, %v", m, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || st.Blocks*uint64(st.Bsize) != DefaultSize {
		t.Fatalf("statfs: type %#x, size %d; want tmpfs of %d", st.Type, st.Blocks*uint64(st.Bsize), DefaultSize)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("mode %v, %v; want 1777", fi.Mode(), err)
	}
	if err := Mount(dir, DefaultSize); err == nil || !strings.Contains(err.Error(), "already mounted") {
		t.Fatalf("second Mount: %v, want already mounted", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := Unmount(dir); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := IsMounted(dir); m {
		t.Fatal("still mounted after Unmount")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Unmount removed the dir: %v", err)
	}
	for range 2 {
		if err := Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir after Remove: %v", err)
	}
}

func TestMountRefusesBadSize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shm", "x")
	if err := Mount(dir, 1000); err == nil {
		t.Fatal("Mount with size 1000 succeeded")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir left after refused Mount: %v", err)
	}
}
