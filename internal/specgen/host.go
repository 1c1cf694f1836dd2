package specgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// This file holds the only parts of the package, with rootfs.go and
// executable.go, that read the host: device nodes for ContainerSpec, the
// daemon's capabilities, and the kernel's sysctls.

// errNotDevice marks a path that is not a block or character device.
var errNotDevice = errors.New("not a device node")

// DeviceFromHost describes the host device at hostPath (symlinks followed)
// as seen at containerPath with the given cgroup permissions. A directory
// gives every device below it, at the same relative paths, as containerd's
// WithDevices does.
func DeviceFromHost(hostPath, containerPath, permissions string) ([]Device, error) {
	var st unix.Stat_t
	if err := unix.Stat(hostPath, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: hostPath, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return devicesUnder(hostPath, containerPath, permissions, nil)
	}
	d, err := deviceFromStat(containerPath, permissions, &st)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w: %w", hostPath, err, errdefs.ErrInvalidArgument)
	}
	return []Device{d}, nil
}

// HostDevices lists the host's devices under /dev for a privileged
// container, skipping what a container gets or makes itself (pts, shm,
// mqueue, fd, console) and the directories runc skips.
func HostDevices() ([]Device, error) {
	skip := map[string]bool{
		"pts": true, "shm": true, "fd": true, "mqueue": true,
		".lxc": true, ".lxd-mounts": true, ".udev": true, "console": true,
	}
	return devicesUnder("/dev", "/dev", "rwm", skip)
}

// devicesUnder walks dir without following symlinks and returns the
// device nodes in it, skipping FIFOs, sockets and regular files and the
// names in skip at any level. Nodes that vanish during the walk are
// skipped.
func devicesUnder(dir, containerDir, permissions string, skip map[string]bool) ([]Device, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, e := range entries {
		if skip[e.Name()] {
			continue
		}
		hostPath := filepath.Join(dir, e.Name())
		containerPath := filepath.Join(containerDir, e.Name())
		if e.IsDir() {
			sub, err := devicesUnder(hostPath, containerPath, permissions, skip)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(hostPath, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, &fs.PathError{Op: "lstat", Path: hostPath, Err: err}
		}
		d, err := deviceFromStat(containerPath, permissions, &st)
		if errors.Is(err, errNotDevice) {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// deviceFromStat describes a device node from its stat data.
func deviceFromStat(containerPath, permissions string, st *unix.Stat_t) (Device, error) {
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return Device{}, errNotDevice
	}
	rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is not uint64 on every architecture
	return Device{
		ContainerPath: containerPath,
		Type:          typ,
		Major:         int64(unix.Major(rdev)),
		Minor:         int64(unix.Minor(rdev)),
		FileMode:      os.FileMode(st.Mode & 0o777),
		UID:           st.Uid,
		GID:           st.Gid,
		Permissions:   permissions,
	}, nil
}

// CurrentCapabilities lists the capabilities in this process's bounding
// set, for Host.Capabilities and Sandbox.Capabilities: a runtime the
// daemon starts can grant no others. Capabilities newer than the package
// knows are left out.
func CurrentCapabilities() ([]string, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	return boundingSet(string(data))
}

// boundingSet reads the CapBnd line of a /proc/<pid>/status file.
func boundingSet(status string) ([]string, error) {
	for _, line := range strings.Split(status, "\n") {
		hex, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse CapBnd %q: %w", hex, err)
		}
		caps := []string{}
		for i, name := range knownCapabilities {
			if mask&(1<<i) != 0 {
				caps = append(caps, name)
			}
		}
		return caps, nil
	}
	return nil, errors.New("no CapBnd line in the process status")
}

// CheckSysctlsExist refuses a sysctl the kernel does not have, which runc
// finds missing in /proc/sys only at create. The daemon's /proc/sys is the
// node's: a pod's namespaces have no sysctl the node lacks, but for the
// per-interface ones (net.ipv4.conf.eth0.*, net.ipv6.neigh.eth0.*) of an
// interface only the pod has, checked against the "default" entry.
func CheckSysctlsExist(req map[string]string) error {
	return checkSysctlsExist(req, "/proc/sys")
}

func checkSysctlsExist(req map[string]string, procSys string) error {
	for name := range req {
		parts := strings.Split(dotSeparated(name), ".")
		for i, p := range parts {
			// In the dotted form a "/" is a "." of the name (eth0/100 is
			// the interface eth0.100).
			parts[i] = strings.ReplaceAll(p, "/", ".")
			if parts[i] == "" || parts[i] == "." || parts[i] == ".." {
				return fmt.Errorf("sysctl %q is not a valid name: %w", name, errdefs.ErrInvalidArgument)
			}
		}
		if len(parts) >= 5 && parts[0] == "net" && (parts[1] == "ipv4" || parts[1] == "ipv6") &&
			(parts[2] == "conf" || parts[2] == "neigh") && !fileExists(filepath.Join(procSys, "net", parts[1], parts[2], parts[3])) {
			parts[3] = "default"
		}
		fi, err := os.Stat(filepath.Join(append([]string{procSys}, parts...)...))
		if err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("sysctl %s: the kernel has no such setting: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
