package specgen

import (
	"errors"
	"maps"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestContainerNamespaces(t *testing.T) {
	const netns = "/var/run/netns/podbay-sb1"
	type nsMap = map[specs.LinuxNamespaceType]string
	podNS := nsMap{
		"pid": "/proc/4242/ns/pid", "network": netns, "ipc": "/proc/4242/ns/ipc",
		"uts": "/proc/4242/ns/uts", "mount": "",
	}
	with := func(changes nsMap, drop ...specs.LinuxNamespaceType) nsMap {
		m := maps.Clone(podNS)
		maps.Copy(m, changes)
		for _, d := range drop {
			delete(m, d)
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Container)
		host    Host
		want    nsMap
		wantErr error
	}{
		{"pod", func(*Container) {}, Host{}, podNS, nil},
		{"pid container", func(c *Container) { c.Security.Namespaces.Pid = NamespaceContainer }, Host{}, with(nsMap{"pid": ""}), nil},
		{"pid node", func(c *Container) { c.Security.Namespaces.Pid = NamespaceNode }, Host{}, with(nil, "pid"), nil},
		{"pid target", func(c *Container) {
			c.Security.Namespaces.Pid, c.Security.Namespaces.TargetPID = NamespaceTarget, 777
		}, Host{}, with(nsMap{"pid": "/proc/777/ns/pid"}), nil},
		{"pid target without a process", func(c *Container) { c.Security.Namespaces.Pid = NamespaceTarget }, Host{}, nil, errdefs.ErrInvalidArgument},
		{"pid unknown mode", func(c *Container) { c.Security.Namespaces.Pid = NamespaceMode(9) }, Host{}, nil, errdefs.ErrInvalidArgument},
		{"ipc node", func(c *Container) { c.Security.Namespaces.Ipc = NamespaceNode }, Host{}, with(nil, "ipc"), nil},
		{"ipc container is not a CRI mode", func(c *Container) { c.Security.Namespaces.Ipc = NamespaceContainer }, Host{}, nil, errdefs.ErrInvalidArgument},
		{"host network", func(c *Container) { c.Sandbox.HostNetwork, c.Sandbox.NetNSPath = true, "" }, Host{}, with(nil, "network", "uts"), nil},
		{"all host, no pause needed", func(c *Container) {
			c.Sandbox.HostNetwork, c.Sandbox.NetNSPath, c.Sandbox.PID = true, "", 0
			c.Security.Namespaces = NamespaceOptions{Pid: NamespaceNode, Ipc: NamespaceNode}
		}, Host{}, nsMap{"mount": ""}, nil},
		{"host network, own pid, pod ipc", func(c *Container) {
			c.Sandbox.HostNetwork, c.Sandbox.NetNSPath = true, ""
			c.Security.Namespaces.Pid = NamespaceContainer
		}, Host{}, nsMap{"pid": "", "ipc": "/proc/4242/ns/ipc", "mount": ""}, nil},
		{"cgroup v2 adds a cgroup namespace", func(*Container) {}, Host{CgroupV2: true}, with(nsMap{"cgroup": ""}), nil},
		{"no pause process", func(c *Container) { c.Sandbox.PID = 0 }, Host{}, nil, errdefs.ErrFailedPrecondition},
		{"no network namespace path", func(c *Container) { c.Sandbox.NetNSPath = "" }, Host{}, nil, errdefs.ErrInvalidArgument},
		// A sandbox without a process: its pinned IPC and UTS namespaces.
		{"pinned, pid container", func(c *Container) {
			c.Sandbox.PID, c.Sandbox.IPCPath, c.Sandbox.UTSPath = 0, "/run/podbay/pinns/sb1/ipc", "/run/podbay/pinns/sb1/uts"
			c.Security.Namespaces.Pid = NamespaceContainer
		}, Host{}, nsMap{"pid": "", "network": netns, "ipc": "/run/podbay/pinns/sb1/ipc", "uts": "/run/podbay/pinns/sb1/uts", "mount": ""}, nil},
		{"pinned, host ipc", func(c *Container) {
			c.Sandbox.PID, c.Sandbox.UTSPath = 0, "/run/podbay/pinns/sb1/uts"
			c.Security.Namespaces = NamespaceOptions{Pid: NamespaceContainer, Ipc: NamespaceNode}
		}, Host{}, nsMap{"pid": "", "network": netns, "uts": "/run/podbay/pinns/sb1/uts", "mount": ""}, nil},
		{"pinned, host network", func(c *Container) {
			c.Sandbox.PID, c.Sandbox.IPCPath, c.Sandbox.HostNetwork, c.Sandbox.NetNSPath = 0, "/run/podbay/pinns/sb1/ipc", true, ""
			c.Security.Namespaces.Pid = NamespaceContainer
		}, Host{}, nsMap{"pid": "", "ipc": "/run/podbay/pinns/sb1/ipc", "mount": ""}, nil},
		{"pinned, pid pod has no process to join", func(c *Container) {
			c.Sandbox.PID, c.Sandbox.IPCPath, c.Sandbox.UTSPath = 0, "/p/ipc", "/p/uts"
		}, Host{}, nil, errdefs.ErrFailedPrecondition},
		{"pinned without an ipc pin", func(c *Container) {
			c.Sandbox.PID, c.Sandbox.UTSPath = 0, "/p/uts"
			c.Security.Namespaces.Pid = NamespaceContainer
		}, Host{}, nil, errdefs.ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			tc.mod(&c)
			s, err := ContainerSpec(c, tc.host)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := nsMap{}
			for _, n := range s.Linux.Namespaces {
				if _, dup := got[n.Type]; dup {
					t.Fatalf("namespace %s listed twice", n.Type)
				}
				got[n.Type] = n.Path
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("namespaces %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContainerSysctls(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sysctls map[string]string
		mod     func(*Container)
		want    map[string]string // nil with ok: no sysctl section
		ok      bool
	}{
		{"none", nil, func(*Container) {}, nil, true},
		{"pod namespaces", map[string]string{"net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1"}, func(*Container) {},
			map[string]string{"net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1"}, true},
		{"host network refuses net.*", map[string]string{"net.ipv4.ip_forward": "1"}, hostNetwork, nil, false},
		{"host network refuses kernel.hostname", map[string]string{"kernel.hostname": "x"}, hostNetwork, nil, false},
		{"host network allows ipc sysctls", map[string]string{"kernel.shmmax": "1"}, hostNetwork, map[string]string{"kernel.shmmax": "1"}, true},
		{"host ipc refuses kernel.shm*", map[string]string{"kernel.shmmax": "1"}, hostIPC, nil, false},
		{"host ipc refuses fs.mqueue.*", map[string]string{"fs.mqueue.msg_max": "20"}, hostIPC, nil, false},
		{"host ipc allows net.*", map[string]string{"net.core.somaxconn": "1024"}, hostIPC, map[string]string{"net.core.somaxconn": "1024"}, true},
		{"empty name", map[string]string{"": "1"}, func(*Container) {}, nil, false},
		{"not namespaced", map[string]string{"kernel.panic": "1"}, func(*Container) {}, nil, false},
		{"kernel.hostname conflicts with the pod's", map[string]string{"kernel.hostname": "x"}, func(*Container) {}, nil, false},
		{"kernel.domainname in the pod's UTS", map[string]string{"kernel.domainname": "x"}, func(*Container) {},
			map[string]string{"kernel.domainname": "x"}, true},
		{"host network refuses kernel.domainname", map[string]string{"kernel.domainname": "x"}, hostNetwork, nil, false},
		{"slash separators", map[string]string{"net/ipv4/ip_forward": "1"}, func(*Container) {}, map[string]string{"net/ipv4/ip_forward": "1"}, true},
		{"host network refuses slash-separated net", map[string]string{"net/ipv4/ip_forward": "1"}, hostNetwork, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Security.Sysctls = tc.sysctls
			tc.mod(&c)
			s, err := ContainerSpec(c, Host{})
			if !tc.ok {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(s.Linux.Sysctl, tc.want) || (s.Linux.Sysctl == nil) != (tc.want == nil) {
				t.Fatalf("sysctls %v, want %v", s.Linux.Sysctl, tc.want)
			}
		})
	}
}

func hostNetwork(c *Container) { c.Sandbox.HostNetwork, c.Sandbox.NetNSPath = true, "" }
func hostIPC(c *Container)     { c.Security.Namespaces.Ipc = NamespaceNode }

// TestSecuritySysctlNames: a sysctl name is a path under /proc/sys, and
// only its prefix names the namespace; a name that leaves its directory,
// or a value that a key=value list would read as a second sysctl
// (CRI-O's CVE-2022-0811), is refused for every handler.
func TestSecuritySysctlNames(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"net.ipv4.ip_unprivileged_port_start", "1024", true},
		{"net/ipv4/conf/eth0.100/forwarding", "1", true},
		{"net.ipv4.conf.eth0/100.forwarding", "1", true},
		{"kernel.domainname", "1+kernel.core_pattern=|/x", true}, // one value, of the pod's UTS namespace
		{"net.ipv4.ip_local_port_range", "1024\t65000", true},
		{"net.ipv4/../../kernel/core_pattern", "|/x", false},
		{"net/../kernel/core_pattern", "|/x", false},
		{"net.ipv4..ip_forward", "1", false},
		{"net.ipv4.ip_forward.", "1", false},
		{"net.ipv4.conf.x/../../../kernel.core_pattern", "1", false},
		{"net.ipv4.ip_forward=1", "1", false},
		{"net.ipv4.ip_forward 1", "1", false},
		{"net.ipv4.ip\x00forward", "1", false},
		{"net.ipv4.ip_forward", "1\nkernel.core_pattern=|/x", false},
		{"net.ipv4.ip_forward", "1\x00", false},
		{"net.ipv4.ip_forward", "1\r", false},
		{"kernel.core_pattern", "|/x", false},
	} {
		err := CheckSysctls(map[string]string{tc.name: tc.value}, SysctlScope{})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("CheckSysctls(%q=%q): %v, want ok=%v or an invalid argument", tc.name, tc.value, err, tc.ok)
		}
	}
}
