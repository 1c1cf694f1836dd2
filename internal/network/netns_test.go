package network

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// newTestNetNS pins a fresh network namespace on a file in a temp dir, the
// way podbay's netns package does, and removes it at the end of the test.
func newTestNetNS(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is only unlocked once it is back in the original
		// namespace; otherwise it exits with the goroutine.
		runtime.LockOSThread()
		err := func() error {
			self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
			orig, err := unix.Open(self, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(orig)
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			mountErr := unix.Mount(self, path, "none", unix.MS_BIND, "")
			if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns back: %w", err)
			}
			runtime.UnlockOSThread()
			if mountErr != nil {
				return fmt.Errorf("bind mount: %w", mountErr)
			}
			return nil
		}()
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() { unmountNetNS(t, path) })
	return path
}

func unmountNetNS(t *testing.T, path string) {
	t.Helper()
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		t.Errorf("unmount %s: %v", path, err)
	}
}

// inNetNS runs fn on a thread in the namespace at path. Sockets fn opens
// belong to that namespace and may be used from any goroutine afterwards.
func inNetNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
			orig, err := unix.Open(self, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(orig)
			target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(target)
			if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns: %w", err)
			}
			fnErr := fn()
			if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns back: %w", err)
			}
			runtime.UnlockOSThread()
			return fnErr
		}()
	}()
	return <-errc
}
