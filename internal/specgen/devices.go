package specgen

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// Device is a device node to create in a container, with the cgroup access
// it is given. DeviceFromHost and HostDevices fill it from the host.
type Device struct {
	ContainerPath string
	Type          string // "c" or "b"
	Major, Minor  int64
	FileMode      os.FileMode // permission bits of the node
	UID, GID      uint32
	// Permissions is the cgroup access, a combination of "r", "w" and "m";
	// empty means "rwm", as with Docker's --device.
	Permissions string
}

// defaultDeviceRules are the devices every container may use, whether or
// not they are in its /dev: containerd's and runc's list.
func defaultDeviceRules() []specs.LinuxDeviceCgroup {
	rule := func(major, minor int64) specs.LinuxDeviceCgroup {
		r := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Access: "rwm"}
		if minor >= 0 {
			r.Minor = &minor
		}
		return r
	}
	return []specs.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"}, // deny everything else
		rule(1, 3),                    // /dev/null
		rule(1, 5),                    // /dev/zero
		rule(1, 7),                    // /dev/full
		rule(1, 8),                    // /dev/random
		rule(1, 9),                    // /dev/urandom
		rule(5, 0),                    // /dev/tty
		rule(5, 1),                    // /dev/console
		rule(5, 2),                    // /dev/ptmx
		rule(136, -1),                 // /dev/pts/*
	}
}

// devices returns the device nodes and cgroup rules of a container. A
// privileged one gets every host device and access to all; the requested
// devices replace host ones at the same path.
func devices(req []Device, privileged bool, hostDevices []Device) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	var nodes []specs.LinuxDevice
	rules := defaultDeviceRules()
	if privileged {
		rules = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	}
	requested := map[string]bool{}
	for _, d := range req {
		n, rule, err := deviceNode(d)
		if err != nil {
			return nil, nil, err
		}
		if requested[n.Path] {
			return nil, nil, fmt.Errorf("two devices at %s: %w", n.Path, errdefs.ErrInvalidArgument)
		}
		requested[n.Path] = true
		nodes = append(nodes, n)
		if !privileged {
			rules = append(rules, rule)
		}
	}
	if privileged {
		var host []specs.LinuxDevice
		for _, d := range hostDevices {
			n, _, err := deviceNode(d)
			if err != nil {
				return nil, nil, fmt.Errorf("host device: %w", err)
			}
			if !requested[n.Path] {
				host = append(host, n)
			}
		}
		nodes = append(host, nodes...)
	}
	if err := checkDeviceNesting(nodes); err != nil {
		return nil, nil, err
	}
	return nodes, rules, nil
}

// runcDefaultDevices are the nodes runc makes in every container's /dev
// unless the spec has a device at the same path.
var runcDefaultDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// checkDeviceNesting refuses a device below another device's path: runc
// would fail to make the directory for it (found by TestCRIFuzz, a host
// directory of devices given at /dev/null).
func checkDeviceNesting(nodes []specs.LinuxDevice) error {
	paths := slices.Clone(runcDefaultDevices)
	for _, n := range nodes {
		paths = append(paths, n.Path)
	}
	for _, n := range nodes {
		for _, p := range paths {
			if strings.HasPrefix(n.Path, p+"/") {
				return fmt.Errorf("device %s is below the device %s: %w", n.Path, p, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

func deviceNode(d Device) (specs.LinuxDevice, specs.LinuxDeviceCgroup, error) {
	p := d.ContainerPath
	if !path.IsAbs(p) || path.Clean(p) == "/" {
		return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, fmt.Errorf("device path %q must be an absolute file path: %w", p, errdefs.ErrInvalidArgument)
	}
	if d.Type != "c" && d.Type != "b" {
		return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, fmt.Errorf("device %s: type %q is neither c nor b: %w", p, d.Type, errdefs.ErrInvalidArgument)
	}
	access := d.Permissions
	if access == "" {
		access = "rwm"
	}
	if !validAccess(access) {
		return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, fmt.Errorf("device %s: permissions %q are not a combination of r, w and m: %w", p, d.Permissions, errdefs.ErrInvalidArgument)
	}
	mode, uid, gid, major, minor := d.FileMode.Perm(), d.UID, d.GID, d.Major, d.Minor
	node := specs.LinuxDevice{
		Path: path.Clean(p), Type: d.Type, Major: d.Major, Minor: d.Minor,
		FileMode: &mode, UID: &uid, GID: &gid,
	}
	rule := specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: access}
	return node, rule, nil
}

// validAccess reports whether access is a non-empty combination of r, w
// and m, each at most once.
func validAccess(access string) bool {
	seen := map[rune]bool{}
	for _, c := range access {
		if !strings.ContainsRune("rwm", c) || seen[c] {
			return false
		}
		seen[c] = true
	}
	return access != ""
}
