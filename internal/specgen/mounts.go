package specgen

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// Propagation is a CRI mount's propagation mode, named by its OCI option.
type Propagation string

// Propagation modes. The zero value is PropagationPrivate.
const (
	PropagationPrivate         Propagation = "rprivate"
	PropagationHostToContainer Propagation = "rslave"
	PropagationBidirectional   Propagation = "rshared"
)

// Mount is a CRI bind mount. HostPath must exist, be resolved (no
// symlinks) and, for rslave/rshared, sit on a mount with slave or shared
// propagation, and a mount at /proc must have a procfs source: those are
// the caller's checks, since they look at the host.
// SELinux relabelling is not supported.
type Mount struct {
	ContainerPath string
	HostPath      string
	Readonly      bool
	// RecursiveReadOnly makes every submount of HostPath read-only too
	// (the OCI option "rro", mount_setattr with AT_RECURSIVE). It needs
	// Readonly and private propagation, as in containerd and CRI-O; the
	// caller checks that the runtime handler supports it.
	RecursiveReadOnly bool
	Propagation       Propagation
	// Options are the CRI mount_options (see CheckMountOptions), or an
	// image volume's nosuid, nodev.
	Options []string
}

// setMounts fills s.Mounts from the base mounts, the sandbox's shm and
// files, and the CRI mounts, and sets the rootfs propagation the CRI mounts
// need. A CRI mount replaces any other mount at its destination (a CRI /dev
// replaces everything under /dev too), the sandbox's files and shm replace
// the base mounts, and the result is ordered by depth so a parent is
// mounted before its children.
func setMounts(s *specs.Spec, c Container) error {
	base := s.Mounts
	if c.Security.Privileged {
		for i := range base {
			if base[i].Destination == "/sys" {
				base[i].Options = rwOptions(base[i].Options)
			}
		}
	}
	cgroupMode := "ro"
	if c.Security.Privileged {
		cgroupMode = "rw"
	}
	base = append(base, specs.Mount{
		Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
		Options: []string{"nosuid", "noexec", "nodev", "relatime", cgroupMode},
	})

	var extra []specs.Mount
	switch {
	case c.Security.Namespaces.Ipc == NamespaceNode:
		extra = append(extra, bindMount("/dev/shm", "/dev/shm", false, PropagationPrivate))
	case c.Sandbox.ShmPath != "":
		extra = append(extra, bindMount(c.Sandbox.ShmPath, "/dev/shm", false, PropagationPrivate))
	}
	for _, f := range c.Files {
		if f.Source == "" || !path.IsAbs(f.Dest) {
			return fmt.Errorf("sandbox file %q -> %q: needs a source and an absolute destination: %w", f.Source, f.Dest, errdefs.ErrInvalidArgument)
		}
		extra = append(extra, bindMount(f.Source, path.Clean(f.Dest), c.Security.ReadonlyRootfs, PropagationPrivate))
	}

	cri := make([]specs.Mount, 0, len(c.Mounts))
	criDests := map[string]bool{}
	for _, m := range c.Mounts {
		om, err := criMount(m)
		if err != nil {
			return err
		}
		if criDests[om.Destination] {
			return fmt.Errorf("two mounts at %s: %w", om.Destination, errdefs.ErrInvalidArgument)
		}
		criDests[om.Destination] = true
		if u := c.Sandbox.UserNS; u != nil {
			u.idmap(&om)
		}
		cri = append(cri, om)
		switch m.Propagation {
		case PropagationBidirectional:
			s.Linux.RootfsPropagation = "rshared"
		case PropagationHostToContainer:
			if s.Linux.RootfsPropagation != "rshared" {
				s.Linux.RootfsPropagation = "rslave"
			}
		}
	}

	extraDests := map[string]bool{}
	mounts := make([]specs.Mount, 0, len(base)+len(extra)+len(cri))
	for _, m := range extra {
		if !criDests[m.Destination] {
			mounts = append(mounts, m)
			extraDests[m.Destination] = true
		}
	}
	mounts = append(mounts, cri...)
	kept := make([]specs.Mount, 0, len(base))
	for _, m := range base {
		d := m.Destination
		if criDests[d] || extraDests[d] || (criDests["/dev"] && strings.HasPrefix(d, "/dev/")) {
			continue
		}
		kept = append(kept, m)
	}
	mounts = append(kept, mounts...)
	sort.SliceStable(mounts, func(i, j int) bool {
		return mountDepth(mounts[i].Destination) < mountDepth(mounts[j].Destination)
	})
	s.Mounts = mounts
	return nil
}

// criMount checks a CRI mount and turns it into an OCI bind mount. A
// relative container path is taken from the root, as runc always did.
func criMount(m Mount) (specs.Mount, error) {
	if !path.IsAbs(m.HostPath) {
		return specs.Mount{}, fmt.Errorf("mount %q -> %q: host path must be absolute: %w", m.HostPath, m.ContainerPath, errdefs.ErrInvalidArgument)
	}
	dest := path.Clean("/" + m.ContainerPath)
	if dest == "/" {
		return specs.Mount{}, fmt.Errorf("mount %q: cannot mount over the container's root: %w", m.HostPath, errdefs.ErrInvalidArgument)
	}
	if strings.HasPrefix(dest, "/proc/") && !slices.Contains(procMountable, dest) {
		return specs.Mount{}, fmt.Errorf("mount %q -> %q: only %v can be mounted inside /proc: %w", m.HostPath, dest, procMountable, errdefs.ErrInvalidArgument)
	}
	p := m.Propagation
	if p == "" {
		p = PropagationPrivate
	}
	if !slices.Contains([]Propagation{PropagationPrivate, PropagationHostToContainer, PropagationBidirectional}, p) {
		return specs.Mount{}, fmt.Errorf("mount %q -> %q: propagation %q: %w", m.HostPath, dest, m.Propagation, errdefs.ErrInvalidArgument)
	}
	if err := CheckMountOptions(m.Options); err != nil {
		return specs.Mount{}, fmt.Errorf("mount %q -> %q: %w", m.HostPath, dest, err)
	}
	om := bindMount(m.HostPath, dest, m.Readonly, p)
	if m.RecursiveReadOnly {
		if !m.Readonly {
			return specs.Mount{}, fmt.Errorf("mount %q -> %q: a recursive read-only mount must be read-only: %w", m.HostPath, dest, errdefs.ErrInvalidArgument)
		}
		if p != PropagationPrivate {
			return specs.Mount{}, fmt.Errorf("mount %q -> %q: a recursive read-only mount cannot have propagation %s (only private): %w", m.HostPath, dest, p, errdefs.ErrInvalidArgument)
		}
		om.Options = append(om.Options, "rro")
	}
	om.Options = withMountOptions(om.Options, m.Options)
	return om, nil
}

// procMountable are the paths inside /proc runc lets a mount cover: the
// files lxcfs emulates, and ns_last_pid for CRIU. runc refuses any other
// (and /proc itself unless the source is a procfs, which the caller checks).
var procMountable = []string{
	"/proc/cpuinfo", "/proc/diskstats", "/proc/meminfo", "/proc/stat", "/proc/swaps", "/proc/uptime",
	"/proc/loadavg", "/proc/slabinfo", "/proc/net/dev", "/proc/sys/kernel/ns_last_pid",
}

func bindMount(src, dest string, readonly bool, p Propagation) specs.Mount {
	mode := "rw"
	if readonly {
		mode = "ro"
	}
	return specs.Mount{
		Destination: dest, Type: "bind", Source: src,
		Options: []string{"rbind", string(p), mode},
	}
}

// mountDepth is the number of components of a cleaned absolute path, "/"
// being 0: Docker's and containerd's ordering key.
func mountDepth(p string) int {
	p = path.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// rwOptions returns opts with "ro" replaced by "rw".
func rwOptions(opts []string) []string {
	out := make([]string, 0, len(opts))
	for _, o := range opts {
		if o == "ro" {
			o = "rw"
		}
		out = append(out, o)
	}
	return out
}
