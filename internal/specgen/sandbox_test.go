package specgen

import (
	"errors"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
)

func ptr[T any](v T) *T { return &v }

func base() Sandbox {
	return Sandbox{
		ID: "abc", Name: "web", Namespace: "default", UID: "u1", LogDir: "/var/log/pods/x",
		RootfsPath: "/var/lib/podbay/pause/rootfs", Args: []string{"/pause"},
		Hostname: "web-host", NetNSPath: "/var/run/netns/podbay-abc", CgroupsPath: "/podbay/podbay-abc",
	}
}

func nsTypes(s *specs.Spec) map[specs.LinuxNamespaceType]string {
	m := map[specs.LinuxNamespaceType]string{}
	for _, n := range s.Linux.Namespaces {
		m[n.Type] = n.Path
	}
	return m
}

func TestSandboxSpecNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mod      func(*Sandbox)
		want     []specs.LinuxNamespaceType
		hostname string
	}{
		{"pod network", func(*Sandbox) {}, []specs.LinuxNamespaceType{"mount", "pid", "ipc", "uts", "network"}, "web-host"},
		{"host network", func(s *Sandbox) { s.HostNetwork = true; s.NetNSPath = "" }, []specs.LinuxNamespaceType{"mount", "pid", "ipc"}, ""},
		{"host pid", func(s *Sandbox) { s.HostPID = true }, []specs.LinuxNamespaceType{"mount", "ipc", "uts", "network"}, "web-host"},
		{"host ipc", func(s *Sandbox) { s.HostIPC = true }, []specs.LinuxNamespaceType{"mount", "pid", "uts", "network"}, "web-host"},
		{"all host", func(s *Sandbox) { s.HostNetwork, s.HostPID, s.HostIPC, s.NetNSPath = true, true, true, "" }, []specs.LinuxNamespaceType{"mount"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := base()
			tc.mod(&sb)
			s, err := SandboxSpec(sb)
			if err != nil {
				t.Fatal(err)
			}
			got := nsTypes(s)
			if len(got) != len(tc.want) {
				t.Fatalf("namespaces %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if _, ok := got[w]; !ok {
					t.Fatalf("namespaces %v lack %s", got, w)
				}
			}
			if p, ok := got["network"]; ok && p != sb.NetNSPath {
				t.Fatalf("network namespace path %q, want the sandbox key %q", p, sb.NetNSPath)
			}
			if s.Hostname != tc.hostname {
				t.Fatalf("hostname %q, want %q", s.Hostname, tc.hostname)
			}
		})
	}
}

func TestSandboxSpecOOMScoreAdj(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req, min *int
		want     int
	}{
		{"default", nil, nil, -998},
		{"default clamped", nil, ptr(0), 0},
		{"requested", ptr(-500), nil, -500},
		{"requested above minimum", ptr(100), ptr(0), 100},
		{"requested below minimum", ptr(-999), ptr(-10), -10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := base()
			sb.OOMScoreAdj, sb.MinOOMScoreAdj = tc.req, tc.min
			s, err := SandboxSpec(sb)
			if err != nil {
				t.Fatal(err)
			}
			if *s.Process.OOMScoreAdj != tc.want {
				t.Fatalf("oom_score_adj %d, want %d", *s.Process.OOMScoreAdj, tc.want)
			}
		})
	}
}

func TestSandboxSpecAnnotationsAndFields(t *testing.T) {
	sb := base()
	sb.Annotations = map[string]string{"a": "b", annotations.ContainerType: "spoofed"}
	sb.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
	sb.Files = []File{{Source: "/x/resolv.conf", Dest: "/etc/resolv.conf"}}
	sb.RunAsUser, sb.RunAsGroup = ptr(int64(65535)), ptr(int64(65534))
	sb.SupplementalGroups = []int64{5, 6}
	sb.CPUShares, sb.CPUQuota, sb.CPUPeriod, sb.MemoryLimit = 512, 50000, 100000, 64<<20
	if s, err := SandboxSpec(sb); err != nil || s.Annotations[annotations.SandboxMemory] != "" {
		t.Fatalf("without HasResources the totals are no annotations: %v %v", err, s.Annotations)
	}
	sb.HasResources = true
	s, err := SandboxSpec(sb)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		annotations.SandboxCPUPeriod: "100000",
		annotations.SandboxCPUQuota:  "50000",
		annotations.SandboxCPUShares: "512",
		annotations.SandboxMemory:    "67108864",
		"a":                          "b",
		annotations.ContainerType:    annotations.ContainerTypeSandbox,
		annotations.SandboxID:        "abc",
		annotations.SandboxName:      "web",
		annotations.SandboxNamespace: "default",
		annotations.SandboxUID:       "u1",
		annotations.SandboxLogDir:    "/var/log/pods/x",
	}
	for k, v := range want {
		if s.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, s.Annotations[k], v)
		}
	}
	if !s.Root.Readonly || s.Root.Path != sb.RootfsPath {
		t.Errorf("root %+v", s.Root)
	}
	if s.Linux.Sysctl["net.ipv4.ip_unprivileged_port_start"] != "0" {
		t.Errorf("sysctl %v", s.Linux.Sysctl)
	}
	if s.Linux.CgroupsPath != sb.CgroupsPath {
		t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
	}
	if u := s.Process.User; u.UID != 65535 || u.GID != 65534 || len(u.AdditionalGids) != 2 {
		t.Errorf("user %+v", u)
	}
	r := s.Linux.Resources
	if *r.CPU.Shares != 512 || *r.CPU.Quota != 50000 || *r.CPU.Period != 100000 || *r.Memory.Limit != 64<<20 {
		t.Errorf("resources %+v %+v", r.CPU, r.Memory)
	}
	var found bool
	for _, m := range s.Mounts {
		if m.Destination == "/etc/resolv.conf" && m.Source == "/x/resolv.conf" && m.Type == "bind" {
			found = true
		}
	}
	if !found {
		t.Errorf("resolv.conf mount missing: %+v", s.Mounts)
	}
	if !s.Process.NoNewPrivileges {
		t.Error("no_new_privileges not set")
	}
}

func TestSandboxSpecPrivileged(t *testing.T) {
	sb := base()
	sb.Privileged = true
	s, err := SandboxSpec(sb)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Process.Capabilities.Bounding) != len(knownCapabilities) || s.Linux.MaskedPaths != nil {
		t.Fatalf("privileged sandbox: caps %d masked %v", len(s.Process.Capabilities.Bounding), s.Linux.MaskedPaths)
	}
}

func TestSandboxSpecRejects(t *testing.T) {
	for name, mod := range map[string]func(*Sandbox){
		"no id":     func(s *Sandbox) { s.ID = "" },
		"no rootfs": func(s *Sandbox) { s.RootfsPath = "" },
		"no args":   func(s *Sandbox) { s.Args = nil },
		"no netns":  func(s *Sandbox) { s.NetNSPath = "" },
	} {
		sb := base()
		mod(&sb)
		if _, err := SandboxSpec(sb); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// What the runtime would refuse at create: SandboxSpec and CheckSandbox
// (which the server calls before anything is made) refuse it alike.
func TestCheckSandbox(t *testing.T) {
	hostNet := func(s *Sandbox) { s.HostNetwork, s.NetNSPath = true, "" }
	for _, tc := range []struct {
		name string
		mod  func(*Sandbox)
		ok   bool
	}{
		{"base", func(*Sandbox) {}, true},
		{"hostname of 64 bytes", func(s *Sandbox) { s.Hostname = strings.Repeat("h", 64) }, true},
		{"hostname of 65 bytes", func(s *Sandbox) { s.Hostname = strings.Repeat("h", 65) }, false},
		{"hostname with a line break", func(s *Sandbox) { s.Hostname = "a\nb" }, false},
		{"hostname with NUL", func(s *Sandbox) { s.Hostname = "a\x00b" }, false},
		{"host network ignores the hostname", func(s *Sandbox) { hostNet(s); s.Hostname = strings.Repeat("h", 65) }, true},
		{"namespaced sysctls", func(s *Sandbox) {
			s.Sysctls = map[string]string{"net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "10", "kernel.domainname": "x"}
		}, true},
		{"slash-separated sysctl", func(s *Sandbox) { s.Sysctls = map[string]string{"net/ipv4/conf/eth0.100/forwarding": "1"} }, true},
		{"empty sysctl", func(s *Sandbox) { s.Sysctls = map[string]string{"": "1"} }, false},
		{"not namespaced", func(s *Sandbox) { s.Sysctls = map[string]string{"kernel.panic": "1"} }, false},
		{"not a sysctl", func(s *Sandbox) { s.Sysctls = map[string]string{"../../x": "1"} }, false},
		{"kernel.hostname", func(s *Sandbox) { s.Sysctls = map[string]string{"kernel.hostname": "x"} }, false},
		{"net.* with host network", func(s *Sandbox) { hostNet(s); s.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"} }, false},
		{"domainname with host network", func(s *Sandbox) { hostNet(s); s.Sysctls = map[string]string{"kernel.domainname": "x"} }, false},
		{"ipc sysctl with host ipc", func(s *Sandbox) { s.HostIPC = true; s.Sysctls = map[string]string{"kernel.msgmax": "1"} }, false},
		{"mqueue sysctl with host ipc", func(s *Sandbox) { s.HostIPC = true; s.Sysctls = map[string]string{"fs.mqueue.msg_max": "1"} }, false},
		{"resources", func(s *Sandbox) { s.CPUShares, s.CPUQuota, s.CPUPeriod, s.MemoryLimit = 2, 1000, 1000000, 6<<20 }, true},
		{"negative quota and memory are not applied", func(s *Sandbox) { s.CPUQuota, s.MemoryLimit = -5, -5 }, true},
		{"cpu shares too high", func(s *Sandbox) { s.CPUShares = 262145 }, false},
		{"cpu shares from a negative", func(s *Sandbox) { s.CPUShares = uint64(1<<64 - 1) }, false},
		{"memory below what runc needs", func(s *Sandbox) { s.MemoryLimit = 4096 }, false},
		{"cpu period too long", func(s *Sandbox) { s.CPUPeriod = 1 << 31 }, false},
		{"cpu quota under 1ms", func(s *Sandbox) { s.CPUQuota = 1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := base()
			tc.mod(&sb)
			check := CheckSandbox(sb)
			_, spec := SandboxSpec(sb)
			for _, err := range []error{check, spec} {
				if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
					t.Fatalf("%v, want ok=%v or an invalid argument", err, tc.ok)
				}
			}
		})
	}
}

func TestSandboxSpecPrivilegedHostCapabilities(t *testing.T) {
	sb := base()
	sb.Privileged = true
	sb.Capabilities = []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}
	s, err := SandboxSpec(sb)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Process.Capabilities.Bounding; len(got) != 2 || got[0] != "CAP_CHOWN" || got[1] != "CAP_SYS_ADMIN" {
		t.Fatalf("privileged sandbox capabilities %v, want the host's", got)
	}
}

// The pod's shm replaces the sandbox's own /dev/shm tmpfs, as it does a
// container's (TestContainerMounts "sandbox shm"); without one the sandbox
// keeps the base spec's tmpfs.
func TestSandboxSpecShm(t *testing.T) {
	for _, tc := range []struct {
		name, shmPath string
		want          specs.Mount
	}{
		{"own tmpfs", "", specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
		{"pod shm", "/run/podbay/shm/abc", specs.Mount{Destination: "/dev/shm", Type: "bind", Source: "/run/podbay/shm/abc", Options: []string{"rbind", "rprivate", "rw"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := base()
			sb.ShmPath = tc.shmPath
			s, err := SandboxSpec(sb)
			if err != nil {
				t.Fatal(err)
			}
			var got []specs.Mount
			for _, m := range s.Mounts {
				if m.Destination == "/dev/shm" {
					got = append(got, m)
				}
			}
			if len(got) != 1 || got[0].Type != tc.want.Type || got[0].Source != tc.want.Source || strings.Join(got[0].Options, ",") != strings.Join(tc.want.Options, ",") {
				t.Fatalf("/dev/shm mounts %+v, want one %+v", got, tc.want)
			}
		})
	}
}
