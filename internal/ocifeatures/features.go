// Package ocifeatures finds out what a runtime handler can do beyond the
// baseline, for the per-handler features Status reports (CRI
// RuntimeHandlerFeatures): recursive read-only mounts and user namespaces.
//
// An OCI runtime tells what it supports with `<runtime> features` (the OCI
// runtime-spec's features document, runc ≥ 1.1, crun ≥ 1.9); the kernel
// must support the system calls behind them as well. A runtime without the
// features command (crun 1.8) is taken to support neither, as containerd
// does.
package ocifeatures

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Runtime is the part of an OCI runtime's features document podbay reads.
type Runtime struct {
	// MountOptions are the mount options the runtime understands.
	MountOptions []string
	// Namespaces are the namespace types it can create or join.
	Namespaces []string
	// IDMapMounts: it can make idmapped mounts (mount uidMappings and
	// gidMappings, runtime-spec 1.1's mountExtensions.idmap).
	IDMapMounts bool
}

// document is the OCI features document (runtime-spec features.md),
// reduced to the fields Runtime holds.
type document struct {
	MountOptions []string `json:"mountOptions"`
	Linux        *struct {
		Namespaces      []string `json:"namespaces"`
		MountExtensions *struct {
			IDMap *struct {
				Enabled *bool `json:"enabled"`
			} `json:"idmap"`
		} `json:"mountExtensions"`
	} `json:"linux"`
}

// Parse reads the output of `<runtime> features`.
func Parse(b []byte) (Runtime, error) {
	var d document
	if err := json.Unmarshal(b, &d); err != nil {
		return Runtime{}, fmt.Errorf("parse runtime features: %w", err)
	}
	rt := Runtime{MountOptions: d.MountOptions}
	if l := d.Linux; l != nil {
		rt.Namespaces = l.Namespaces
		if me := l.MountExtensions; me != nil && me.IDMap != nil && me.IDMap.Enabled != nil {
			rt.IDMapMounts = *me.IDMap.Enabled
		}
	}
	return rt, nil
}

// queryTimeout bounds `<runtime> features`.
const queryTimeout = 10 * time.Second

// Query runs `<path> features` and parses its output. A runtime without
// the command fails here.
func Query(ctx context.Context, path string) (Runtime, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "features").Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			msg += ": " + strings.TrimSpace(string(ee.Stderr))
		}
		return Runtime{}, fmt.Errorf("%s features: %s", path, msg)
	}
	return Parse(out)
}

// Kernel is a Linux kernel version.
type Kernel struct{ Major, Minor int }

// ParseKernel reads a kernel release ("6.18.44-fc-v595", "5.10.0-28-amd64").
func ParseKernel(release string) (Kernel, error) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return Kernel{}, fmt.Errorf("kernel release %q: no major.minor", release)
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return Kernel{}, fmt.Errorf("kernel release %q: %w", release, err)
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	m, err := strconv.Atoi(minor)
	if err != nil {
		return Kernel{}, fmt.Errorf("kernel release %q: %w", release, err)
	}
	return Kernel{Major: major, Minor: m}, nil
}

// AtLeast reports whether k is major.minor or newer.
func (k Kernel) AtLeast(major, minor int) bool {
	return k.Major > major || (k.Major == major && k.Minor >= minor)
}

func (k Kernel) String() string { return fmt.Sprintf("%d.%d", k.Major, k.Minor) }

// HostKernel is the running kernel's version, read once.
var HostKernel = sync.OnceValues(func() (Kernel, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Kernel{}, fmt.Errorf("uname: %w", err)
	}
	return ParseKernel(unix.ByteSliceToString(u.Release[:]))
})

// Kernel versions the features need.
var (
	// mount_setattr(2) with AT_RECURSIVE, which the runtime's "rro"
	// option uses: 5.12.
	kernelRRO = Kernel{5, 12}
	// Idmapped mounts on overlayfs, the container's rootfs: 5.19 (bind
	// mounts of ext4/xfs/btrfs have them since 5.12, tmpfs since 6.3).
	kernelIDMap = Kernel{5, 19}
)

// Handler is what a runtime handler supports: the runtime and the kernel
// together.
type Handler struct {
	// RecursiveReadOnlyMounts: a CRI mount may be recursive_read_only
	// (the OCI mount option "rro").
	RecursiveReadOnlyMounts bool
	// UserNamespaces: a pod may have its own user namespace (hostUsers:
	// false), with idmapped mounts.
	UserNamespaces bool
	// SpecVersion is the runtime-spec version the runtime implements
	// (QuerySpecVersion), written as the bundles' ociVersion; "" = the
	// version of podbay's runtime-spec module.
	SpecVersion string
}

// For combines a runtime's features with the kernel's version.
func For(rt Runtime, k Kernel) Handler {
	return Handler{
		RecursiveReadOnlyMounts: slices.Contains(rt.MountOptions, "rro") && k.AtLeast(kernelRRO.Major, kernelRRO.Minor),
		UserNamespaces: rt.IDMapMounts && slices.Contains(rt.Namespaces, "user") &&
			k.AtLeast(kernelIDMap.Major, kernelIDMap.Minor),
	}
}

// Detect asks the runtime binary at path and the running kernel what the
// handler supports. On an error (a runtime without `features`, a kernel
// release it cannot read) it reports nothing supported, with the reason.
func Detect(ctx context.Context, path string) (Handler, error) {
	k, err := HostKernel()
	if err != nil {
		return Handler{}, err
	}
	rt, err := Query(ctx, path)
	if err != nil {
		return Handler{}, err
	}
	return For(rt, k), nil
}
