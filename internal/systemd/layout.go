// Package systemd is podbay's systemd cgroup driver: the names of the
// slices and scopes its pods and containers live in, the cgroupfs paths
// they map to, and a D-Bus connection to systemd that starts and stops
// transient scopes (conmon's and the shims', and a cut-short create's
// that must go).
//
// Under the systemd driver a pod's cgroup parent is a slice name such as
// kubepods-burstable-pod<uid>.slice (the kubelet's), a container's
// linux.cgroupsPath is "<slice>:podbay:<id>", which runc and crun
// (--systemd-cgroup) turn into the transient scope podbay-<id>.scope in
// that slice, and systemd puts the scope's cgroup at the slice's expanded
// path: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/podbay-<id>.scope.
package systemd

import (
	"fmt"
	"os"
	"path"
	"strings"
)

// Driver names (config.CgroupDriver).
const (
	DriverSystemd  = "systemd"
	DriverCgroupfs = "cgroupfs"
	DriverAuto     = "auto"
)

// ScopePrefix is the prefix of the container scopes podbay's runtimes
// create: podbay-<id>.scope.
const ScopePrefix = "podbay"

// Booted reports whether systemd is PID 1, as sd_booted(3): the directory
// /run/systemd/system exists.
func Booted() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// Resolve turns a cgroup_driver value into the driver podbay runs with:
// "auto" is systemd when booted says systemd is PID 1, else cgroupfs.
// "systemd" without systemd is an error.
func Resolve(driver string, booted func() bool) (string, error) {
	switch driver {
	case DriverAuto:
		if booted() {
			return DriverSystemd, nil
		}
		return DriverCgroupfs, nil
	case DriverCgroupfs:
		return driver, nil
	case DriverSystemd:
		if !booted() {
			return "", fmt.Errorf("cgroup_driver %q: systemd is not PID 1 on this host (no /run/systemd/system); use cgroupfs or auto", driver)
		}
		return driver, nil
	default:
		return "", fmt.Errorf("cgroup_driver %q: want systemd, cgroupfs or auto", driver)
	}
}

// CheckSlice refuses what is not a slice unit name: a name ending in
// .slice, without "/", whose dash-separated parts are not empty (as
// systemd's and runc's ExpandSlice require). "-.slice" is the root slice.
func CheckSlice(name string) error {
	_, err := ExpandSlice(name)
	return err
}

// SliceName is the slice a pod cgroup parent names: the parent itself, or
// for a cgroupfs-style path its last element, as containerd (the path's
// base) and CRI-O do — critest gives "/test.slice" under the systemd
// driver, and /kubepods.slice/kubepods-burstable.slice is
// kubepods-burstable.slice.
func SliceName(parent string) string {
	if strings.Contains(parent, "/") {
		return path.Base(parent)
	}
	return parent
}

// ExpandSlice returns the cgroupfs path of a slice, as runc's ExpandSlice:
// a-b-c.slice is /a.slice/a-b.slice/a-b-c.slice, -.slice is /. A
// cgroupfs-style path counts as its last element (SliceName).
func ExpandSlice(slice string) (string, error) {
	const suffix = ".slice"
	slice = SliceName(slice)
	if len(slice) <= len(suffix) || !strings.HasSuffix(slice, suffix) {
		if slice == suffix {
			return "", fmt.Errorf("invalid slice name %q", slice)
		}
		return "", fmt.Errorf("cgroup parent %q is not a systemd slice (want a name such as kubepods-burstable-pod<uid>.slice)", slice)
	}
	if strings.Contains(slice, "/") {
		return "", fmt.Errorf("invalid slice name %q: it contains /", slice)
	}
	name := strings.TrimSuffix(slice, suffix)
	if name == "-" {
		return "/", nil
	}
	var b strings.Builder
	prefix := ""
	for _, part := range strings.Split(name, "-") {
		if part == "" {
			return "", fmt.Errorf("invalid slice name %q: empty part", slice)
		}
		b.WriteString("/" + prefix + part + suffix)
		prefix += part + "-"
	}
	return b.String(), nil
}

// ScopeName is the unit of a container whose cgroupsPath is
// SpecPath(slice, id): podbay-<id>.scope.
func ScopeName(id string) string { return ScopePrefix + "-" + id + ".scope" }

// Layout maps a pod's cgroup parent and a container (or sandbox) ID to
// the OCI cgroupsPath and the cgroupfs path of the container's cgroup,
// for one driver.
type Layout struct {
	// Systemd is true for the systemd driver.
	Systemd bool
}

// SpecPath is the container's linux.cgroupsPath: <parent>/podbay-<id>
// (cgroupfs) or <parent>:podbay:<id> (systemd).
func (l Layout) SpecPath(parent, id string) string {
	if l.Systemd {
		return SliceName(parent) + ":" + ScopePrefix + ":" + id
	}
	return path.Join(parent, ScopePrefix+"-"+id)
}

// Dir is the container's cgroup relative to the hierarchies' root:
// <parent>/podbay-<id> or <expanded parent>/podbay-<id>.scope. A parent
// that is not a slice under systemd gives "" (CreateContainer and
// RunPodSandbox refuse such parents).
func (l Layout) Dir(parent, id string) string {
	if !l.Systemd {
		return path.Join(parent, ScopePrefix+"-"+id)
	}
	p := l.ParentDir(parent)
	if p == "" {
		return ""
	}
	return path.Join(p, ScopeName(id))
}

// ParentDir is the cgroupfs path of a pod's cgroup parent: parent itself
// (cgroupfs) or the slice expanded (systemd; "" if it is no slice).
func (l Layout) ParentDir(parent string) string {
	if !l.Systemd {
		return parent
	}
	p, err := ExpandSlice(parent)
	if err != nil {
		return ""
	}
	return p
}

// ParseSpecPath splits a systemd cgroupsPath "slice:prefix:name" into the
// slice and the unit runc and crun make of it (prefix-name.scope, or name
// itself when it is a slice). ok is false for a cgroupfs path.
func ParseSpecPath(p string) (slice, unit string, ok bool) {
	parts := strings.Split(p, ":")
	if len(parts) != 3 {
		return "", "", false
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	if slice == "" {
		slice = "system.slice"
	}
	if strings.HasSuffix(name, ".slice") {
		return slice, name, true
	}
	if prefix != "" {
		name = prefix + "-" + name
	}
	return slice, name + ".scope", true
}
