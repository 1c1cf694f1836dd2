// Package netns creates, pins and releases the network namespaces podbay
// hands to CNI and to the OCI runtime, and dials from inside them for port
// forwarding.
//
// A namespace is pinned by bind-mounting /proc/self/task/<tid>/ns/net of a
// thread that unshared it onto a file, the way `ip netns add` does; the
// namespace then lives as long as the mount, independent of any process. A
// pod's file is kept after Stop (unmount only) and deleted on Remove
// (docs/design.md, "StopPodSandbox" and "RemovePodSandbox").
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/procfs"
)

// Prefix begins the file name of every namespace podbay pins, so that a
// restarted daemon can tell its own orphans from other programs' namespaces.
const Prefix = "podbay-"

// Path returns the sandbox key of a sandbox: <dir>/podbay-<id>.
func Path(dir, id string) string { return filepath.Join(dir, Prefix+id) }

// Pin creates the file at path and pins a new network namespace on it. If
// the file exists and already holds a namespace, Pin fails; a stale empty
// file is reused. On error nothing is left mounted; the file may remain and
// is removed by Remove.
func Pin(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create netns dir: %w", err)
	}
	mounted, err := IsMounted(path)
	if err != nil {
		return err
	}
	if mounted {
		return fmt.Errorf("pin network namespace %s: already mounted", path)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file: %w", err)
	}
	f.Close()

	// unshare(CLONE_NEWNET) moves only the calling thread, so do it on a
	// dedicated locked thread. If that thread cannot be returned to the
	// original namespace it stays locked and Go discards it when the
	// goroutine exits, so no other goroutine ever runs in the new namespace.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- pinOnThisThread(path)
	}()
	return <-errc
}

func pinOnThisThread(path string) (err error) {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return fmt.Errorf("open current network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare network namespace: %w", err)
	}
	self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	mountErr := unix.Mount(self, path, "none", unix.MS_BIND, "")
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime will terminate it.
		if mountErr == nil {
			_ = unix.Unmount(path, unix.MNT_DETACH)
		}
		return fmt.Errorf("return to original network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	if mountErr != nil {
		return fmt.Errorf("bind-mount network namespace on %s: %w", path, mountErr)
	}
	return nil
}

// Unmount releases the namespace pinned at path but keeps the file. It is
// idempotent: an unmounted or missing path is not an error.
func Unmount(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		// EINVAL: not a mount point (already unmounted).
		return nil
	default:
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
}

// Remove unmounts path if needed and deletes the file. Idempotent.
func Remove(path string) error {
	if err := Unmount(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove network namespace file: %w", err)
	}
	return nil
}

// IsMounted reports whether a namespace is pinned at path, by comparing the
// file system magic of what path resolves to with nsfs.
func IsMounted(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Type == unix.NSFS_MAGIC, nil
}

// List returns the IDs of the podbay namespaces files in dir.
func List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), Prefix); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// InUse reports whether any process is in the namespace pinned at path. An
// unmounted path holds no namespace and is not in use.
func InUse(path string) (bool, error) {
	mounted, err := IsMounted(path)
	if err != nil || !mounted {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false, fmt.Errorf("list processes: %w", err)
	}
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		// Processes come and go while we look; a failed readlink is one
		// that is gone.
		if link, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "net")); err == nil && link == want {
			return true, nil
		}
	}
	return false, nil
}

// Dial connects to address (host:port, numeric) over TCP from inside the
// network namespace at path, the way a process in the pod would. Only the
// socket is created in the namespace, on a locked thread that returns to
// its own namespace right after; the connection is then used from
// anywhere. If the thread cannot return it stays locked and Go discards
// it, as in Pin.
func Dial(ctx context.Context, path, address string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, err := dialOnThisThread(ctx, path, address)
		ch <- result{conn, err}
	}()
	res := <-ch
	return res.conn, res.err
}

func dialOnThisThread(ctx context.Context, path, address string) (net.Conn, error) {
	target, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer target.Close()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, fmt.Errorf("open current network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	// The dialer creates the socket on this thread before it waits for
	// the connection, so the socket belongs to the namespace.
	var d net.Dialer
	conn, dialErr := d.DialContext(ctx, "tcp", address)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime will terminate it.
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("return to original network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	if dialErr != nil {
		return nil, dialErr
	}
	return conn, nil
}

// ReadNetDev reads /proc/net/dev as seen from inside the network namespace
// at path (loopback left out): the pod's interface counters for a pod with
// no process to read /proc/<pid>/net/dev of. A locked thread enters the
// namespace, reads its own /proc/thread-self/net/dev and returns; if it
// cannot return it stays locked and Go discards it, as in Pin.
func ReadNetDev(path string) ([]procfs.NetDev, error) {
	type result struct {
		devs []procfs.NetDev
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		devs, err := readNetDevOnThisThread(path)
		ch <- result{devs, err}
	}()
	res := <-ch
	return res.devs, res.err
}

func readNetDevOnThisThread(path string) ([]procfs.NetDev, error) {
	target, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer target.Close()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open current network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	devs, readErr := readThreadNetDev()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime will terminate it.
		return nil, fmt.Errorf("return to original network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return devs, readErr
}

func readThreadNetDev() ([]procfs.NetDev, error) {
	f, err := os.Open("/proc/thread-self/net/dev")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return procfs.ParseNetDev(f)
}
