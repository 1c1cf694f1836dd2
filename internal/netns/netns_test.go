package netns

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func TestPinUnmountRemove(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	p := Path(dir, "abc")
	if err := Pin(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Remove(p) })
	mounted, err := IsMounted(p)
	if err != nil || !mounted {
		t.Fatalf("IsMounted after Pin = %v, %v; want true", mounted, err)
	}
	// The pinned namespace must differ from ours.
	var self, pinned os.FileInfo
	if self, err = os.Stat("/proc/self/ns/net"); err != nil {
		t.Fatal(err)
	}
	if pinned, err = os.Stat(p); err != nil {
		t.Fatal(err)
	}
	if os.SameFile(self, pinned) {
		t.Fatal("pinned namespace is the host's")
	}
	if err := Pin(p); err == nil {
		t.Fatal("second Pin on a mounted path succeeded")
	}
	if inUse, err := InUse(p); err != nil || inUse {
		t.Fatalf("InUse of a namespace no process is in = %v, %v", inUse, err)
	}
	if inUse, err := InUse("/proc/self/ns/net"); err != nil || !inUse {
		t.Fatalf("InUse of our own namespace = %v, %v", inUse, err)
	}
	ids, err := List(dir)
	if err != nil || len(ids) != 1 || ids[0] != "abc" {
		t.Fatalf("List = %v, %v", ids, err)
	}
	for i := 0; i < 2; i++ {
		if err := Unmount(p); err != nil {
			t.Fatalf("Unmount #%d: %v", i, err)
		}
	}
	if mounted, _ := IsMounted(p); mounted {
		t.Fatal("still mounted after Unmount")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Unmount removed the file: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := Remove(p); err != nil {
			t.Fatalf("Remove #%d: %v", i, err)
		}
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("file still there after Remove: %v", err)
	}
}

// After Pin, the calling goroutine's thread must be back in the host
// namespace, however many pins run at once.
func TestPinConcurrentKeepsHostNamespace(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := filepath.Join(dir, Prefix+string(rune('a'+i)))
			if err := Pin(p); err != nil {
				t.Error(err)
				return
			}
			if err := Remove(p); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	for i := 0; i < 50; i++ {
		now, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		if now != host {
			t.Fatalf("a thread was left in namespace %s, host is %s", now, host)
		}
	}
}

func TestUnmountMissing(t *testing.T) {
	requireRoot(t)
	if err := Remove(filepath.Join(t.TempDir(), "nope")); err != nil {
		t.Fatal(err)
	}
}
