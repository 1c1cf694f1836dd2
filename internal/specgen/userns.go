package specgen

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// UserNamespace is a pod's own user namespace (hostUsers: false, CRI
// NamespaceMode POD for users): the one range of IDs it maps onto the
// host, for users and for groups, as the kubelet sends them. The sandbox
// creates the namespace; its containers join the pause process's, and
// their volumes are idmapped mounts with the same mappings, so that a file
// the host's ID HostID owns is the container's ContainerID's.
type UserNamespace struct {
	UIDs, GIDs specs.LinuxIDMapping
}

// idSpace is the number of 32-bit IDs; the last, 4294967295, is "no ID".
const idSpace = 1 << 32

func (u *UserNamespace) check() error {
	for _, m := range []struct {
		kind string
		m    specs.LinuxIDMapping
	}{{"uid", u.UIDs}, {"gid", u.GIDs}} {
		if m.m.Size == 0 {
			return fmt.Errorf("user namespace %s mapping of size 0: %w", m.kind, errdefs.ErrInvalidArgument)
		}
		if uint64(m.m.HostID)+uint64(m.m.Size) > idSpace-1 || uint64(m.m.ContainerID)+uint64(m.m.Size) > idSpace-1 {
			return fmt.Errorf("user namespace %s mapping %d:%d:%d goes past the last ID: %w",
				m.kind, m.m.ContainerID, m.m.HostID, m.m.Size, errdefs.ErrInvalidArgument)
		}
		if m.m.ContainerID != 0 {
			// The kubelet maps from 0: the pod's root is an unprivileged
			// host ID. Without 0 the pause process has no identity.
			return fmt.Errorf("user namespace %s mapping %d:%d:%d does not start at container ID 0: %w",
				m.kind, m.m.ContainerID, m.m.HostID, m.m.Size, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// apply gives s the user namespace: a new one (path "") or the one at
// path, with its mappings, which the runtime needs either way (it checks
// them against a joined namespace, and maps the idmapped mounts with them).
func (u *UserNamespace) apply(s *specs.Spec, path string) {
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: path})
	s.Linux.UIDMappings = []specs.LinuxIDMapping{u.UIDs}
	s.Linux.GIDMappings = []specs.LinuxIDMapping{u.GIDs}
	// A sysfs mount needs the network namespace to belong to the user
	// namespace; the pod's was made by podbay, on the host's, before its
	// user namespace existed, and the kernel refuses it (EPERM). So /sys
	// is the host's, bound read-only, as CRI-O does for such pods.
	for i := range s.Mounts {
		if m := &s.Mounts[i]; m.Destination == "/sys" && m.Type == "sysfs" {
			*m = specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
		}
	}
}

// idmap makes m an idmapped mount (runtime-spec 1.1 mount uidMappings and
// gidMappings) with the namespace's mappings.
func (u *UserNamespace) idmap(m *specs.Mount) {
	m.UIDMappings = []specs.LinuxIDMapping{u.UIDs}
	m.GIDMappings = []specs.LinuxIDMapping{u.GIDs}
}

// checkUserNamespaceSandbox refuses what a pod with its own user namespace
// cannot have, as the Kubernetes API does for hostUsers: false: the host's
// PID or IPC namespace. The host's network is allowed (the
// UserNamespacesHostNetworkSupport gate; RuntimeHandlerFeatures
// user_namespaces_host_network): /sys is then the host's, bound read-only,
// as for any pod whose network namespace its user namespace does not own.
func checkUserNamespaceSandbox(sb Sandbox) error {
	if sb.UserNS == nil {
		return nil
	}
	if err := sb.UserNS.check(); err != nil {
		return err
	}
	if sb.HostPID || sb.HostIPC {
		return fmt.Errorf("a pod with its own user namespace cannot use the host's PID or IPC namespace: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}
