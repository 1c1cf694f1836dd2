package specgen

import (
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// The kubelet's form: 65536 IDs from container ID 0, at a multiple of
// 65536 on the host.
func kubeletUserNS() *UserNamespace {
	return &UserNamespace{
		UIDs: specs.LinuxIDMapping{ContainerID: 0, HostID: 65536 * 3, Size: 65536},
		GIDs: specs.LinuxIDMapping{ContainerID: 0, HostID: 65536 * 4, Size: 65536},
	}
}

func TestSandboxSpecUserNamespace(t *testing.T) {
	sb := base()
	sb.UserNS = kubeletUserNS()
	s, err := SandboxSpec(sb)
	if err != nil {
		t.Fatal(err)
	}
	ns := nsTypes(s)
	if p, ok := ns[specs.UserNamespace]; !ok || p != "" {
		t.Errorf("namespaces %v: want a new user namespace", s.Linux.Namespaces)
	}
	if !slices.Equal(s.Linux.UIDMappings, []specs.LinuxIDMapping{sb.UserNS.UIDs}) ||
		!slices.Equal(s.Linux.GIDMappings, []specs.LinuxIDMapping{sb.UserNS.GIDs}) {
		t.Errorf("mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	requireHostSys(t, s)

	// Without: the host's, no mappings.
	s, err = SandboxSpec(base())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nsTypes(s)[specs.UserNamespace]; ok || s.Linux.UIDMappings != nil || s.Linux.GIDMappings != nil {
		t.Errorf("a pod on the host's users has %v, %v", s.Linux.Namespaces, s.Linux.UIDMappings)
	}
}

// The host's network is allowed with a user namespace
// (user_namespaces_host_network): no network namespace, /sys the host's.
func TestSandboxSpecUserNamespaceHostNetwork(t *testing.T) {
	sb := base()
	sb.UserNS = kubeletUserNS()
	sb.HostNetwork, sb.NetNSPath = true, ""
	s, err := SandboxSpec(sb)
	if err != nil {
		t.Fatal(err)
	}
	ns := nsTypes(s)
	if _, ok := ns[specs.NetworkNamespace]; ok {
		t.Errorf("namespaces %v: want the host's network", s.Linux.Namespaces)
	}
	if _, ok := ns[specs.UserNamespace]; !ok {
		t.Errorf("namespaces %v: want a user namespace", s.Linux.Namespaces)
	}
	requireHostSys(t, s)
}

func TestSandboxSpecUserNamespaceRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Sandbox)
	}{
		{"empty uid range", func(sb *Sandbox) { sb.UserNS.UIDs.Size = 0 }},
		{"empty gid range", func(sb *Sandbox) { sb.UserNS.GIDs.Size = 0 }},
		{"uid range past the end", func(sb *Sandbox) { sb.UserNS.UIDs.HostID = 1<<32 - 65536 }},
		{"gid range past the end", func(sb *Sandbox) { sb.UserNS.GIDs.HostID = 1<<32 - 100 }},
		{"not from container ID 0", func(sb *Sandbox) { sb.UserNS.UIDs.ContainerID = 1000 }},
		{"host pid", func(sb *Sandbox) { sb.HostPID = true }},
		{"host ipc", func(sb *Sandbox) { sb.HostIPC = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := base()
			sb.UserNS = kubeletUserNS()
			tc.mod(&sb)
			if _, err := SandboxSpec(sb); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("SandboxSpec: %v, want an invalid argument", err)
			}
			if err := CheckSandbox(sb); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("CheckSandbox: %v, want an invalid argument", err)
			}
		})
	}
}

func TestContainerSpecUserNamespace(t *testing.T) {
	c := testContainer()
	c.Sandbox.UserNS = kubeletUserNS()
	c.Mounts = []Mount{
		{ContainerPath: "/data", HostPath: "/srv/data"},
		{ContainerPath: "/conf", HostPath: "/srv/conf", Readonly: true, RecursiveReadOnly: true},
	}
	c.Files = []File{{Source: "/sb/hosts", Dest: "/etc/hosts"}}
	s := mustSpec(t, c, Host{})
	var user *specs.LinuxNamespace
	for i, n := range s.Linux.Namespaces {
		if n.Type == specs.UserNamespace {
			user = &s.Linux.Namespaces[i]
		}
	}
	// The pause process's, like the pod's other namespaces.
	if user == nil || user.Path != "/proc/4242/ns/user" {
		t.Fatalf("namespaces %v: want the pause process's user namespace", s.Linux.Namespaces)
	}
	want := c.Sandbox.UserNS
	if !slices.Equal(s.Linux.UIDMappings, []specs.LinuxIDMapping{want.UIDs}) || !slices.Equal(s.Linux.GIDMappings, []specs.LinuxIDMapping{want.GIDs}) {
		t.Errorf("mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	for _, m := range s.Mounts {
		idmapped := m.UIDMappings != nil || m.GIDMappings != nil
		switch m.Destination {
		case "/data", "/conf":
			// The volumes are idmapped mounts with the pod's mappings.
			if !slices.Equal(m.UIDMappings, []specs.LinuxIDMapping{want.UIDs}) || !slices.Equal(m.GIDMappings, []specs.LinuxIDMapping{want.GIDs}) {
				t.Errorf("volume %s: mappings %v %v", m.Destination, m.UIDMappings, m.GIDMappings)
			}
		default:
			if idmapped {
				t.Errorf("%s (%s) is idmapped", m.Destination, m.Type)
			}
		}
	}

	requireHostSys(t, s)

	// No pause process to join: refused, not a spec without the namespace.
	c.Sandbox.PID = 0
	c.Sandbox.HostNetwork, c.Sandbox.NetNSPath = true, ""
	c.Security.Namespaces.Ipc = NamespaceNode
	if _, err := ContainerSpec(c, Host{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("no pause process: %v", err)
	}

	// A bad range is refused for a container too.
	c = testContainer()
	c.Sandbox.UserNS = kubeletUserNS()
	c.Sandbox.UserNS.GIDs.Size = 0
	if _, err := ContainerSpec(c, Host{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty gid range: %v", err)
	}
}

// requireHostSys: a user-namespaced spec's /sys is the host's, bound
// read-only, not a sysfs mount (which the kernel refuses in a user
// namespace that does not own the pod's network namespace).
func requireHostSys(t *testing.T, s *specs.Spec) {
	t.Helper()
	var sys []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == "/sys" {
			sys = append(sys, m)
		}
	}
	if len(sys) != 1 || sys[0].Type != "bind" || sys[0].Source != "/sys" ||
		!slices.Contains(sys[0].Options, "rbind") || !slices.Contains(sys[0].Options, "ro") {
		t.Errorf("/sys mounts %+v, want one read-only rbind of the host's /sys", sys)
	}
}
