package netns

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
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

// TestDial: Dial connects from inside the namespace: to a server there,
// not to one on the host's loopback at the same port, and the thread it
// used is back in the host's namespace.
func TestDial(t *testing.T) {
	requireRoot(t)
	for _, bin := range []string{"/usr/bin/nsenter", "/bin/busybox"} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	p := Path(t.TempDir(), "dial")
	if err := Pin(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Remove(p) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A host server on a free port; the namespace's loopback is down.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	addr := host.Addr().String()
	if conn, err := Dial(ctx, p, addr); err == nil {
		conn.Close()
		t.Fatal("Dial reached the host's loopback from the pinned namespace")
	}

	// A server in the namespace on the same port.
	_, port, _ := net.SplitHostPort(addr)
	if out, err := exec.Command("nsenter", "--net="+p, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("bring up lo: %v: %s", err, out)
	}
	srv := exec.Command("nsenter", "--net="+p, "/bin/busybox", "nc", "-l", "-p", port, "-e", "/bin/busybox", "echo", "from the namespace")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := Dial(ctx, p, addr)
		if err != nil {
			continue // nc is not listening yet
		}
		got, err = io.ReadAll(conn)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if string(got) != "from the namespace\n" {
		t.Fatalf("read %q from the namespace's server", got)
	}

	// Every thread is still in the host's namespace.
	self, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		fi, err := os.Stat(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err == nil && !os.SameFile(fi, self) {
			t.Errorf("thread %s was left in another network namespace", task.Name())
		}
	}
}
