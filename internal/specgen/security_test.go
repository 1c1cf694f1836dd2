package specgen

import (
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

func sortedCaps(caps ...[]string) []string {
	var out []string
	for _, c := range caps {
		out = append(out, c...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func without(list []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return slices.Contains(drop, s) })
}

func TestContainerCapabilities(t *testing.T) {
	defaults := sortedCaps(defaultCapabilities)
	all := sortedCaps(knownCapabilities)
	for _, tc := range []struct {
		name       string
		add, drop  []string
		privileged bool
		want       []string // nil: an invalid argument error
	}{
		{"defaults", nil, nil, false, defaults},
		{"add one", []string{"NET_ADMIN"}, nil, false, sortedCaps(defaults, []string{"CAP_NET_ADMIN"})},
		{"add with prefix, any case", []string{"cap_sys_admin", "Sys_Time"}, nil, false, sortedCaps(defaults, []string{"CAP_SYS_ADMIN", "CAP_SYS_TIME"})},
		{"add one already there", []string{"CHOWN"}, nil, false, defaults},
		{"drop some", nil, []string{"CHOWN", "cap_kill"}, false, without(defaults, "CAP_CHOWN", "CAP_KILL")},
		{"drop one not there", nil, []string{"SYS_ADMIN"}, false, defaults},
		{"add ALL", []string{"ALL"}, nil, false, all},
		{"add all, lower case", []string{"all"}, nil, false, all},
		{"add ALL drop one", []string{"ALL"}, []string{"CHOWN"}, false, without(all, "CAP_CHOWN")},
		{"drop ALL", nil, []string{"ALL"}, false, []string{}},
		{"drop ALL add one", []string{"NET_BIND_SERVICE"}, []string{"ALL"}, false, []string{"CAP_NET_BIND_SERVICE"}},
		{"add ALL drop ALL", []string{"ALL"}, []string{"ALL"}, false, []string{}},
		{"add and drop the same: dropped", []string{"NET_ADMIN"}, []string{"NET_ADMIN"}, false, defaults},
		{"privileged gets all, add/drop ignored", []string{"NET_ADMIN"}, []string{"ALL"}, true, all},
		{"unknown add", []string{"FLY"}, nil, false, nil},
		{"a single cap outside the host's set is still asked for", []string{"SYS_RESOURCE"}, nil, false,
			sortedCaps(defaults, []string{"CAP_SYS_RESOURCE"})},
		{"unknown drop", nil, []string{"CAP_NOPE"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Security.CapAdd, c.Security.CapDrop = tc.add, tc.drop
			c.Sandbox.Privileged, c.Security.Privileged = tc.privileged, tc.privileged
			s, err := ContainerSpec(c, Host{})
			if tc.want == nil {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			caps := s.Process.Capabilities
			for name, set := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective, "permitted": caps.Permitted} {
				if !slices.Equal(set, tc.want) {
					t.Errorf("%s %v, want %v", name, set, tc.want)
				}
			}
			if len(caps.Inheritable) != 0 || len(caps.Ambient) != 0 {
				t.Errorf("inheritable %v, ambient %v: want none", caps.Inheritable, caps.Ambient)
			}
		})
	}
}

func TestContainerCapabilitiesFromHost(t *testing.T) {
	host := without(knownCapabilities, "CAP_SYS_RESOURCE")
	hostSorted := sortedCaps(host)
	for _, tc := range []struct {
		name       string
		add, drop  []string
		privileged bool
		want       []string
	}{
		{"privileged gets the daemon's set", nil, nil, true, hostSorted},
		{"add ALL gets the daemon's set", []string{"ALL"}, nil, false, hostSorted},
		{"add ALL drop one", []string{"ALL"}, []string{"NET_RAW"}, false, without(hostSorted, "CAP_NET_RAW")},
		{"defaults are unchanged", nil, nil, false, sortedCaps(defaultCapabilities)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Security.CapAdd, c.Security.CapDrop = tc.add, tc.drop
			c.Sandbox.Privileged, c.Security.Privileged = tc.privileged, tc.privileged
			s := mustSpec(t, c, Host{Capabilities: host})
			if !slices.Equal(s.Process.Capabilities.Bounding, tc.want) {
				t.Fatalf("capabilities %v, want %v", s.Process.Capabilities.Bounding, tc.want)
			}
		})
	}
}

// syscallAllowed reports whether sc has an allow rule naming call.
func syscallAllowed(sc *specs.LinuxSeccomp, call string) bool {
	for _, r := range sc.Syscalls {
		if r.Action == specs.ActAllow && slices.Contains(r.Names, call) {
			return true
		}
	}
	return false
}

func TestContainerSeccomp(t *testing.T) {
	const ociProfile = `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
		"syscalls":[{"names":["sethostname","setdomainname"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}`
	const dockerProfile = `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
		{"name":"read","action":"SCMP_ACT_ALLOW"},
		{"names":["mount"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}},
		{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}`
	for _, tc := range []struct {
		name    string
		profile SeccompProfile
		mod     func(*Container)
		check   func(*testing.T, *specs.LinuxSeccomp)
		wantErr bool
	}{
		{"unconfined", SeccompProfile{}, nil, func(t *testing.T, sc *specs.LinuxSeccomp) {
			if sc != nil {
				t.Fatalf("seccomp %+v, want none", sc)
			}
		}, false},
		{"runtime default", SeccompProfile{Type: ProfileRuntimeDefault}, nil, func(t *testing.T, sc *specs.LinuxSeccomp) {
			if sc == nil || sc.DefaultAction != specs.ActErrno || !syscallAllowed(sc, "read") {
				t.Fatalf("seccomp %+v, want Docker's default profile", sc)
			}
			if syscallAllowed(sc, "mount") {
				t.Fatal("default profile allows mount without CAP_SYS_ADMIN")
			}
		}, false},
		{"runtime default follows the capabilities", SeccompProfile{Type: ProfileRuntimeDefault},
			func(c *Container) { c.Security.CapAdd = []string{"SYS_ADMIN"} }, func(t *testing.T, sc *specs.LinuxSeccomp) {
				if !syscallAllowed(sc, "mount") {
					t.Fatal("default profile refuses mount with CAP_SYS_ADMIN")
				}
			}, false},
		{"privileged has none", SeccompProfile{Type: ProfileRuntimeDefault},
			func(c *Container) { c.Sandbox.Privileged, c.Security.Privileged = true, true }, func(t *testing.T, sc *specs.LinuxSeccomp) {
				if sc != nil {
					t.Fatal("privileged container got a seccomp profile")
				}
			}, false},
		{"localhost, OCI format", SeccompProfile{Type: ProfileLocalhost, Localhost: []byte(ociProfile)}, nil, func(t *testing.T, sc *specs.LinuxSeccomp) {
			if sc.DefaultAction != specs.ActAllow || len(sc.Syscalls) != 1 || sc.Syscalls[0].Action != specs.ActErrno ||
				!slices.Equal(sc.Syscalls[0].Names, []string{"sethostname", "setdomainname"}) || *sc.Syscalls[0].ErrnoRet != 1 ||
				!slices.Equal(sc.Architectures, []specs.Arch{specs.ArchX86_64}) {
				t.Fatalf("seccomp %+v", sc)
			}
		}, false},
		{"localhost, Docker format", SeccompProfile{Type: ProfileLocalhost, Localhost: []byte(dockerProfile)}, nil, func(t *testing.T, sc *specs.LinuxSeccomp) {
			if !syscallAllowed(sc, "read") || !syscallAllowed(sc, "personality") || syscallAllowed(sc, "mount") {
				t.Fatalf("seccomp %+v", sc)
			}
		}, false},
		{"localhost, invalid JSON", SeccompProfile{Type: ProfileLocalhost, Localhost: []byte(`{"defaultAction":`)}, nil, nil, true},
		{"localhost, empty", SeccompProfile{Type: ProfileLocalhost, Localhost: []byte(" \n")}, nil, nil, true},
		{"localhost, no default action", SeccompProfile{Type: ProfileLocalhost,
			Localhost: []byte(`{"syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}`)}, nil, nil, true},
		{"localhost, nothing in it", SeccompProfile{Type: ProfileLocalhost, Localhost: []byte(`{}`)}, nil, nil, true},
		{"localhost, unknown default action", SeccompProfile{Type: ProfileLocalhost, Localhost: []byte(`{"defaultAction":"ALLOW"}`)}, nil, nil, true},
		{"localhost, unknown action", SeccompProfile{Type: ProfileLocalhost,
			Localhost: []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"DENY"}]}`)}, nil, nil, true},
		{"localhost, rule without names", SeccompProfile{Type: ProfileLocalhost,
			Localhost: []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_ERRNO"}]}`)}, nil, nil, true},
		{"localhost, unknown operator", SeccompProfile{Type: ProfileLocalhost,
			Localhost: []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"EQ"}]}]}`)}, nil, nil, true},
		{"localhost, both name and names", SeccompProfile{Type: ProfileLocalhost,
			Localhost: []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"name":"read","names":["write"],"action":"SCMP_ACT_ERRNO"}]}`)}, nil, nil, true},
		{"unknown type", SeccompProfile{Type: ProfileType(7)}, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Security.Seccomp = tc.profile
			if tc.mod != nil {
				tc.mod(&c)
			}
			s, err := ContainerSpec(c, Host{})
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s.Linux.Seccomp)
		})
	}
}

func TestContainerAppArmor(t *testing.T) {
	on := Host{AppArmor: true, AppArmorDefaultProfile: "podbay-default"}
	for _, tc := range []struct {
		name       string
		profile    AppArmorProfile
		privileged bool
		host       Host
		want       string
		wantErr    bool
	}{
		{"off: unconfined", AppArmorProfile{}, false, Host{}, "", false},
		{"off: runtime default is dropped", AppArmorProfile{Type: ProfileRuntimeDefault}, false, Host{}, "", false},
		{"off: localhost is refused", AppArmorProfile{Type: ProfileLocalhost, Localhost: "mine"}, false, Host{}, "", true},
		{"on: unconfined", AppArmorProfile{}, false, on, "", false},
		{"on: runtime default", AppArmorProfile{Type: ProfileRuntimeDefault}, false, on, "podbay-default", false},
		{"on: runtime default without a loaded default", AppArmorProfile{Type: ProfileRuntimeDefault}, false, Host{AppArmor: true}, "", false},
		{"on: privileged runtime default is unconfined", AppArmorProfile{Type: ProfileRuntimeDefault}, true, on, "", false},
		{"on: localhost", AppArmorProfile{Type: ProfileLocalhost, Localhost: "mine"}, false, on, "mine", false},
		{"on: localhost/ prefix trimmed", AppArmorProfile{Type: ProfileLocalhost, Localhost: "localhost/mine"}, false, on, "mine", false},
		{"on: privileged localhost still applies", AppArmorProfile{Type: ProfileLocalhost, Localhost: "mine"}, true, on, "mine", false},
		{"on: localhost without a name", AppArmorProfile{Type: ProfileLocalhost}, false, on, "", true},
		{"unknown type", AppArmorProfile{Type: ProfileType(9)}, false, on, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Security.AppArmor = tc.profile
			c.Sandbox.Privileged, c.Security.Privileged = tc.privileged, tc.privileged
			s, err := ContainerSpec(c, tc.host)
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Process.ApparmorProfile != tc.want {
				t.Fatalf("apparmor profile %q, want %q", s.Process.ApparmorProfile, tc.want)
			}
		})
	}
}
