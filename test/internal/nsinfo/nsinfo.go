// Package nsinfo looks inside network namespaces from a test process: it
// lists the interfaces of a pinned namespace and runs a function on a thread
// that has joined one.
//
// It is shared by the failure-injecting runtime wrapper (which records what
// the sandbox namespace looked like when the runtime was asked to create the
// sandbox container) and by the integration tests.
package nsinfo

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Interface is one network interface as seen inside a namespace.
type Interface struct {
	Name  string   `json:"name"`
	Index int      `json:"index"`
	MAC   string   `json:"mac,omitempty"`
	Flags string   `json:"flags"`
	Addrs []string `json:"addrs"` // CIDR notation
}

// Do runs fn on an OS thread that has joined the network namespace pinned at
// path. The thread is returned to the caller's namespace afterwards; if that
// fails the thread is left locked, so that the Go runtime discards it instead
// of reusing a thread in the wrong namespace.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			if restored {
				runtime.UnlockOSThread()
			}
		}()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			restored = true
			errc <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer self.Close()
		target, err := os.Open(path)
		if err != nil {
			restored = true
			errc <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			restored = true
			errc <- fmt.Errorf("join network namespace %s: %w", path, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("return from network namespace %s: %w", path, err)
			return
		}
		restored = true
		errc <- fnErr
	}()
	return <-errc
}

// Interfaces lists the interfaces and addresses inside the network namespace
// pinned at path.
func Interfaces(path string) ([]Interface, error) {
	var out []Interface
	err := Do(path, func() error {
		ifaces, err := net.Interfaces()
		if err != nil {
			return fmt.Errorf("list interfaces: %w", err)
		}
		for _, ifc := range ifaces {
			addrs, err := ifc.Addrs()
			if err != nil {
				return fmt.Errorf("addresses of %s: %w", ifc.Name, err)
			}
			item := Interface{Name: ifc.Name, Index: ifc.Index, MAC: ifc.HardwareAddr.String(), Flags: ifc.Flags.String(), Addrs: []string{}}
			for _, a := range addrs {
				item.Addrs = append(item.Addrs, a.String())
			}
			out = append(out, item)
		}
		return nil
	})
	return out, err
}

// Listen opens a listener inside the network namespace pinned at path. The
// socket stays in that namespace after the thread has left it.
func Listen(path, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(path, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}
