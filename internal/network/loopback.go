package network

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// loopbackUp brings the loopback interface up in the network namespace at
// path: what the CNI loopback plugin does for a pod's "lo" (its ADD sets
// the link up; the kernel gives it 127.0.0.1 and ::1), without an exec of
// the plugin, which cost a pod's start 5-8 ms here. A namespace has no
// other state for "lo", so there is nothing to undo: it goes with the
// namespace.
func loopbackUp(path string) error {
	errc := make(chan error, 1)
	go func() {
		// setns moves only the calling thread. A thread that cannot be
		// returned to the daemon's namespace stays locked, and the Go
		// runtime ends it with the goroutine.
		runtime.LockOSThread()
		errc <- loopbackUpOnThisThread(path)
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("bring up lo in %s: %w", path, err)
	}
	return nil
}

func loopbackUpOnThisThread(path string) error {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := os.Open(path)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	// A socket belongs to the namespace it was made in: the ioctls below
	// act there whichever thread makes them.
	fd, sockErr := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		if sockErr == nil {
			unix.Close(fd)
		}
		return fmt.Errorf("return to the daemon's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	if sockErr != nil {
		return sockErr
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
