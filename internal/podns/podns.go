// Package podns pins the IPC and UTS namespaces of a pod that has no
// sandbox process, the way package netns pins its network namespace: a
// locked OS thread unshares the namespaces, sets the pod's hostname and
// sysctls in them, and bind-mounts /proc/thread-self/ns/<kind> onto a file
// under the pod's pin directory, <root>/<id>/ipc and <root>/<id>/uts. The
// namespaces then live as long as the mounts, and the pod's containers join
// them by path (CRI-O's pinns does the same for drop_infra_ctr). The thread
// is never returned to Go's pool: it is left locked, and Go ends it when its
// goroutine returns.
//
// Unmount (StopPodSandbox) releases the namespaces and keeps the files;
// Remove deletes the pin directory. Both are idempotent.
package podns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/netns"
)

// Kinds of pinned namespace, named as /proc/<pid>/ns names them.
const (
	IPC = "ipc"
	UTS = "uts"
)

// kinds are the pinned kinds with their clone flags, in pin order.
var kinds = []struct {
	name string
	flag int
}{{IPC, unix.CLONE_NEWIPC}, {UTS, unix.CLONE_NEWUTS}}

// Root is the directory of every pod's pin directory under podbayd's state
// dir: it is a tmpfs that does not survive a reboot, as the mounts do not.
func Root(stateDir string) string { return filepath.Join(stateDir, "pinns") }

// Dir is a pod's pin directory.
func Dir(root, id string) string { return filepath.Join(root, id) }

// Path is the file a pod's namespace of kind (IPC, UTS) is pinned on.
func Path(dir, kind string) string { return filepath.Join(dir, kind) }

// Request is what to pin and set up in a pod's namespaces.
type Request struct {
	// IPC and UTS: pin a new namespace of that kind.
	IPC, UTS bool
	// Hostname and Domainname are set in the new UTS namespace.
	Hostname, Domainname string
	// Sysctls are the pod's sysctls, as CRI names them (dotted, or with
	// "/" separators) and specgen.CheckSysctls accepted them: net.* are
	// written in the network namespace at NetNS, the others (IPC sysctls,
	// fs.mqueue.*, kernel.domainname) in the new namespaces.
	Sysctls map[string]string
	// NetNS is the pod's pinned network namespace; empty with the host's
	// network, where no net.* sysctl is accepted.
	NetNS string
}

// Pin makes dir and pins the namespaces req asks for on files in it, with
// the hostname and sysctls set. On error nothing is left mounted and dir
// is removed.
func Pin(dir string, req Request) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin dir: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := Remove(dir); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	var flags int
	var pins []string
	for _, k := range kinds {
		if (k.name == IPC && !req.IPC) || (k.name == UTS && !req.UTS) {
			continue
		}
		path := Path(dir, k.name)
		if mounted, err := netns.IsMounted(path); err != nil {
			return err
		} else if mounted {
			return fmt.Errorf("pin %s namespace %s: already mounted", k.name, path)
		}
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o444)
		if err != nil {
			return fmt.Errorf("create %s namespace file: %w", k.name, err)
		}
		f.Close()
		flags |= k.flag
		pins = append(pins, k.name)
	}
	local, net, err := splitSysctls(req.Sysctls)
	if err != nil {
		return err
	}
	if len(net) > 0 && req.NetNS == "" {
		return fmt.Errorf("net.* sysctls need the pod's own network namespace")
	}
	// Never the host's: a sysctl is written only in a namespace pinned
	// here (CheckSysctls has refused the others already).
	for k := range local {
		if own := (k == "kernel/domainname" && req.UTS) || (k != "kernel/domainname" && req.IPC); !own {
			return fmt.Errorf("sysctl %s is not in a namespace of the pod's own", strings.ReplaceAll(k, "/", "."))
		}
	}
	if flags == 0 && len(local) == 0 && len(net) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends up in the pod's namespaces and
		// Go discards it when this goroutine returns.
		runtime.LockOSThread()
		errc <- pinOnThisThread(dir, flags, pins, req, local, net)
	}()
	return <-errc
}

func pinOnThisThread(dir string, flags int, pins []string, req Request, local, net map[string]string) error {
	if flags != 0 {
		if err := unix.Unshare(flags); err != nil {
			return fmt.Errorf("unshare pod namespaces: %w", err)
		}
	}
	if req.UTS {
		if req.Hostname != "" {
			if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
				return fmt.Errorf("set hostname %q: %w", req.Hostname, err)
			}
		}
		if req.Domainname != "" {
			if err := unix.Setdomainname([]byte(req.Domainname)); err != nil {
				return fmt.Errorf("set domainname %q: %w", req.Domainname, err)
			}
		}
	}
	// /proc/sys answers for the writing thread's IPC and UTS namespaces.
	if err := writeSysctls(local); err != nil {
		return err
	}
	for _, kind := range pins {
		self := fmt.Sprintf("/proc/thread-self/ns/%s", kind)
		if err := unix.Mount(self, Path(dir, kind), "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s namespace on %s: %w", kind, Path(dir, kind), err)
		}
	}
	if len(net) > 0 {
		f, err := os.Open(req.NetNS)
		if err != nil {
			return fmt.Errorf("open network namespace: %w", err)
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter network namespace %s: %w", req.NetNS, err)
		}
		if err := writeSysctls(net); err != nil {
			return err
		}
	}
	return nil
}

// splitSysctls parts sysctls into those of the network namespace and the
// others, both keyed by their path under /proc/sys.
func splitSysctls(req map[string]string) (local, net map[string]string, err error) {
	local, net = map[string]string{}, map[string]string{}
	for k, v := range req {
		p, err := sysctlPath(k)
		if err != nil {
			return nil, nil, err
		}
		if strings.HasPrefix(p, "net/") {
			net[p] = v
		} else {
			local[p] = v
		}
	}
	return local, net, nil
}

// sysctlPath is a sysctl's path under /proc/sys: a dotted name has its
// dots and slashes swapped (net.ipv4.conf.eth0/100.forwarding is
// net/ipv4/conf/eth0.100/forwarding), a name with "/" separators is one
// already. It refuses what would leave /proc/sys.
func sysctlPath(name string) (string, error) {
	p := name
	if i := strings.IndexAny(name, "./"); i >= 0 && name[i] == '.' {
		p = strings.Map(func(r rune) rune {
			switch r {
			case '.':
				return '/'
			case '/':
				return '.'
			}
			return r
		}, name)
	}
	if p == "" || slices.ContainsFunc(strings.Split(p, "/"), func(s string) bool { return s == "" || s == "." || s == ".." }) {
		return "", fmt.Errorf("sysctl %q: not a valid name", name)
	}
	return p, nil
}

func writeSysctls(m map[string]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(m[k]), 0o644); err != nil {
			return &SysctlError{Name: strings.ReplaceAll(k, "/", "."), Err: err}
		}
	}
	return nil
}

// SysctlError is a sysctl the kernel refused.
type SysctlError struct {
	Name string
	Err  error
}

func (e *SysctlError) Error() string { return fmt.Sprintf("set sysctl %s: %v", e.Name, e.Err) }
func (e *SysctlError) Unwrap() error { return e.Err }

// Unmount releases the pod's pinned namespaces and keeps the files.
// Idempotent: a missing dir or file, or one not mounted, is not an error.
func Unmount(dir string) error {
	for _, k := range kinds {
		if err := netns.Unmount(Path(dir, k.name)); err != nil {
			return err
		}
	}
	return nil
}

// Remove unmounts and deletes the pod's pin directory. Idempotent.
func Remove(dir string) error {
	if err := Unmount(dir); err != nil {
		return err
	}
	// RemoveAll fails on a file still mounted (EBUSY) rather than
	// leaving a namespace pinned on a deleted path.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pin dir: %w", err)
	}
	return nil
}

// State reports whether the pin dir exists and whether every pin in it
// is mounted (true for a dir that pins nothing).
func State(dir string) (exists, mounted bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("read pin dir: %w", err)
	}
	for _, e := range entries {
		m, err := netns.IsMounted(filepath.Join(dir, e.Name()))
		if err != nil {
			return true, false, err
		}
		if !m {
			return true, false, nil
		}
	}
	return true, true, nil
}
