package specgen

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// asJSON renders v for comparisons that should ignore pointer identity.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestContainerResources(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Resources
		host Host
		// want is the JSON of LinuxResources without its devices.
		want    string
		wantErr bool
	}{
		{"none", Resources{}, Host{}, `{}`, false},
		{"cpu", Resources{CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, CpusetCpus: "0-1", CpusetMems: "0"}, Host{},
			`{"cpu":{"shares":512,"quota":50000,"period":100000,"cpus":"0-1","mems":"0"}}`, false},
		{"cpuset only", Resources{CpusetCpus: "1"}, Host{}, `{"cpu":{"cpus":"1"}}`, false},
		{"unlimited quota passes through", Resources{CPUQuota: -1}, Host{}, `{"cpu":{"quota":-1}}`, false},
		{"memory without swap control", Resources{MemoryLimit: 8 << 20}, Host{}, `{"memory":{"limit":8388608}}`, false},
		{"memory caps swap too", Resources{MemoryLimit: 8 << 20}, Host{SwapControl: true}, `{"memory":{"limit":8388608,"swap":8388608}}`, false},
		{"explicit swap", Resources{MemoryLimit: 8 << 20, MemorySwapLimit: 16 << 20}, Host{SwapControl: true},
			`{"memory":{"limit":8388608,"swap":16777216}}`, false},
		{"explicit swap without swap control", Resources{MemorySwapLimit: 1 << 21}, Host{}, `{}`, false},
		{"hugepages, sorted", Resources{HugepageLimits: map[string]uint64{"2MB": 4 << 20, "1GB": 0}}, Host{Hugetlb: true},
			`{"hugepageLimits":[{"pageSize":"1GB","limit":0},{"pageSize":"2MB","limit":4194304}]}`, false},
		{"hugepages without hugetlb", Resources{HugepageLimits: map[string]uint64{"2MB": 4 << 20}}, Host{}, `{}`, false},
		{"pids", Resources{PidsLimit: 100}, Host{}, `{"pids":{"limit":100}}`, false},
		{"unified on v2", Resources{Unified: map[string]string{"memory.high": "1000000"}}, Host{CgroupV2: true},
			`{"unified":{"memory.high":"1000000"}}`, false},
		{"unified on v1", Resources{Unified: map[string]string{"memory.high": "1000000"}}, Host{}, ``, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Resources = tc.r
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
			r := *s.Linux.Resources
			r.Devices = nil
			if got := asJSON(t, r); got != tc.want {
				t.Fatalf("resources %s, want %s", got, tc.want)
			}
		})
	}
}

func TestContainerResourcesDoNotAlias(t *testing.T) {
	c := testContainer()
	c.Resources.MemoryLimit = 100 << 20
	s := mustSpec(t, c, Host{SwapControl: true})
	*s.Linux.Resources.Memory.Swap = 5
	if *s.Linux.Resources.Memory.Limit != 100<<20 {
		t.Fatal("memory limit and swap share storage")
	}
}

func TestContainerOOMScoreAdj(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     int
		min     *int
		want    int
		wantErr bool
	}{
		{"default", 0, nil, 0, false},
		{"requested", 500, nil, 500, false},
		{"negative", -500, nil, -500, false},
		{"above the minimum", 100, ptr(0), 100, false},
		{"below the minimum is clamped", -999, ptr(-10), -10, false},
		{"guaranteed pod on a restricted host", -997, ptr(0), 0, false},
		{"too high", 1001, nil, 0, true},
		{"too low", -1001, ptr(0), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Resources.OOMScoreAdj = tc.req
			s, err := ContainerSpec(c, Host{MinOOMScoreAdj: tc.min})
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *s.Process.OOMScoreAdj != tc.want {
				t.Fatalf("oom_score_adj %d, want %d", *s.Process.OOMScoreAdj, tc.want)
			}
		})
	}
}

func TestContainerDevices(t *testing.T) {
	defaults := asJSON(t, defaultDeviceRules())
	gpu := Device{ContainerPath: "/dev/gpu0", Type: "c", Major: 195, Minor: 0, FileMode: 0o660, UID: 0, GID: 44, Permissions: "rw"}
	hostNull := Device{ContainerPath: "/dev/null", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
	hostDisk := Device{ContainerPath: "/dev/sda", Type: "b", Major: 8, Minor: 0, FileMode: 0o660, GID: 6}
	for _, tc := range []struct {
		name       string
		devices    []Device
		privileged bool
		host       []Device
		nodes      string // JSON of linux.devices
		rules      string // JSON of linux.resources.devices
		wantErr    bool
	}{
		{"none", nil, false, []Device{hostNull}, `null`, defaults, false},
		{"one", []Device{gpu}, false, nil,
			`[{"path":"/dev/gpu0","type":"c","major":195,"minor":0,"fileMode":432,"uid":0,"gid":44}]`,
			defaults[:len(defaults)-1] + `,{"allow":true,"type":"c","major":195,"minor":0,"access":"rw"}]`, false},
		{"empty permissions mean rwm", []Device{{ContainerPath: "/dev/xx", Type: "b", Major: 7, Minor: 1}}, false, nil,
			`[{"path":"/dev/xx","type":"b","major":7,"minor":1,"fileMode":0,"uid":0,"gid":0}]`,
			defaults[:len(defaults)-1] + `,{"allow":true,"type":"b","major":7,"minor":1,"access":"rwm"}]`, false},
		{"privileged gets the host's devices and all access", []Device{{ContainerPath: "/dev/null", Type: "c", Major: 1, Minor: 3, FileMode: 0o600}}, true,
			[]Device{hostNull, hostDisk},
			`[{"path":"/dev/sda","type":"b","major":8,"minor":0,"fileMode":432,"uid":0,"gid":6},` +
				`{"path":"/dev/null","type":"c","major":1,"minor":3,"fileMode":384,"uid":0,"gid":0}]`,
			`[{"allow":true,"access":"rwm"}]`, false},
		{"bad permissions", []Device{{ContainerPath: "/dev/x", Type: "c", Permissions: "rwx"}}, false, nil, "", "", true},
		{"too many permissions", []Device{{ContainerPath: "/dev/x", Type: "c", Permissions: "rwmr"}}, false, nil, "", "", true},
		{"repeated permission", []Device{{ContainerPath: "/dev/x", Type: "c", Permissions: "rr"}}, false, nil, "", "", true},
		{"bad type", []Device{{ContainerPath: "/dev/x", Type: "p"}}, false, nil, "", "", true},
		{"relative path", []Device{{ContainerPath: "dev/x", Type: "c"}}, false, nil, "", "", true},
		{"two at one path", []Device{gpu, gpu}, false, nil, "", "", true},
		// runc cannot make a directory where a device is.
		{"below a default device", []Device{{ContainerPath: "/dev/null/0", Type: "c", Major: 136, Minor: 0}}, false, nil, "", "", true},
		{"below a requested device", []Device{gpu, {ContainerPath: "/dev/gpu0/x", Type: "c", Major: 1, Minor: 3}}, false, nil, "", "", true},
		{"a sibling with a common prefix", []Device{gpu, {ContainerPath: "/dev/gpu00", Type: "c", Major: 1, Minor: 3}}, false, nil,
			`[{"path":"/dev/gpu0","type":"c","major":195,"minor":0,"fileMode":432,"uid":0,"gid":44},` +
				`{"path":"/dev/gpu00","type":"c","major":1,"minor":3,"fileMode":0,"uid":0,"gid":0}]`,
			defaults[:len(defaults)-1] + `,{"allow":true,"type":"c","major":195,"minor":0,"access":"rw"},{"allow":true,"type":"c","major":1,"minor":3,"access":"rwm"}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Devices = tc.devices
			c.Sandbox.Privileged, c.Security.Privileged = tc.privileged, tc.privileged
			s, err := ContainerSpec(c, Host{Devices: tc.host})
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := asJSON(t, s.Linux.Devices); got != tc.nodes {
				t.Errorf("devices %s, want %s", got, tc.nodes)
			}
			if got := asJSON(t, s.Linux.Resources.Devices); got != tc.rules {
				t.Errorf("device rules %s, want %s", got, tc.rules)
			}
		})
	}
}

func TestDefaultDeviceRules(t *testing.T) {
	rules := defaultDeviceRules()
	if rules[0].Allow || rules[0].Access != "rwm" || rules[0].Type != "" {
		t.Fatalf("first rule %+v, want deny all", rules[0])
	}
	allowed := map[[2]int64]bool{}
	for _, r := range rules[1:] {
		minor := int64(-1)
		if r.Minor != nil {
			minor = *r.Minor
		}
		allowed[[2]int64{*r.Major, minor}] = r.Allow && r.Type == "c" && r.Access == "rwm"
	}
	for _, d := range [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}, {136, -1}} {
		if !allowed[d] {
			t.Errorf("device %d:%d not allowed", d[0], d[1])
		}
	}
}

// CheckResources refuses what the kernel refuses, as runc reports it only
// at create.
func TestCheckResources(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Resources
		ok   bool
	}{
		{"none", Resources{}, true},
		{"bounds", Resources{CPUShares: 2, CPUQuota: 1000, CPUPeriod: 1000}, true},
		{"upper bounds", Resources{CPUShares: 262144, CPUQuota: 1<<44 - 1, CPUPeriod: 1000000}, true},
		{"negative quota is no limit", Resources{CPUQuota: -1 << 63}, true},
		{"memory -1 is no limit", Resources{MemoryLimit: -1}, true},
		{"memory at the minimum", Resources{MemoryLimit: 6 << 20}, true},
		{"huge memory", Resources{MemoryLimit: 1<<63 - 1}, true},
		{"one share", Resources{CPUShares: 1}, false},
		{"too many shares", Resources{CPUShares: 262145}, false},
		{"quota under 1ms", Resources{CPUQuota: 999}, false},
		{"quota over the kernel's max", Resources{CPUQuota: 1 << 62}, false},
		{"period under 1ms", Resources{CPUPeriod: 999}, false},
		{"period over 1s", Resources{CPUPeriod: 1000001}, false},
		{"memory under the minimum", Resources{MemoryLimit: 4096}, false},
		{"negative memory", Resources{MemoryLimit: -2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckResources(tc.r)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
				t.Fatalf("CheckResources: %v, want ok=%v or an invalid argument", err, tc.ok)
			}
			c := testContainer()
			c.Resources = tc.r
			if _, err := ContainerSpec(c, Host{}); tc.ok != (err == nil) {
				t.Fatalf("ContainerSpec: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
