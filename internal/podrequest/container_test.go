package podrequest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/specgen"
)

// Moved from internal/server with the code they test; their assertions
// are unchanged.

func TestSecurityProfiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *runtimeapi.SecurityProfile
		want specgen.ProfileType
	}{
		{"none is unconfined", nil, specgen.ProfileUnconfined},
		{"runtime default", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, specgen.ProfileRuntimeDefault},
		{"unconfined", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, specgen.ProfileUnconfined},
	} {
		got, err := seccompProfile(tc.in)
		if err != nil || got.Type != tc.want {
			t.Errorf("seccomp %s: %v %v, want %v", tc.name, got.Type, err, tc.want)
		}
	}
	if _, err := seccompProfile(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "relative.json"}); err == nil {
		t.Error("relative localhost seccomp profile accepted")
	}
}

// AppArmor: the field, else the deprecated string, else the runtime
// default, as containerd does.
func TestAppArmorProfiles(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sc        *runtimeapi.LinuxContainerSecurityContext
		want      specgen.ProfileType
		localhost string
		bad       bool
	}{
		{name: "nothing is the runtime default", sc: nil, want: specgen.ProfileRuntimeDefault},
		{name: "field: runtime default", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}, want: specgen.ProfileRuntimeDefault},
		{name: "field: unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}, want: specgen.ProfileUnconfined},
		{name: "field: localhost", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/p1"}}, want: specgen.ProfileLocalhost, localhost: "p1"},
		{name: "field wins over the string", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/old", Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}, want: specgen.ProfileUnconfined},
		{name: "string: runtime/default", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "runtime/default"}, want: specgen.ProfileRuntimeDefault},
		{name: "string: unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "unconfined"}, want: specgen.ProfileUnconfined},
		{name: "string: localhost", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/p2"}, want: specgen.ProfileLocalhost, localhost: "p2"},
		{name: "string: other", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "p3"}, bad: true},
	} {
		got, err := appArmorProfile(tc.sc)
		if tc.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: %+v, %v; want InvalidArgument", tc.name, got, err)
			}
			continue
		}
		if err != nil || got.Type != tc.want || got.Localhost != tc.localhost {
			t.Errorf("%s: %+v, %v; want type %v localhost %q", tc.name, got, err, tc.want, tc.localhost)
		}
	}
}

func TestCheckContainerConfig(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "busybox"}
	md := &runtimeapi.ContainerMetadata{Name: "c"}
	sc := func(s *runtimeapi.LinuxContainerSecurityContext) *runtimeapi.LinuxContainerConfig {
		return &runtimeapi.LinuxContainerConfig{SecurityContext: s}
	}
	for _, tc := range []struct {
		name string
		cfg  *runtimeapi.ContainerConfig
		ok   bool
	}{
		{"nil", nil, false},
		{"no metadata", &runtimeapi.ContainerConfig{Image: img}, false},
		{"no image", &runtimeapi.ContainerConfig{Metadata: md}, false},
		{"absolute log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "/etc/x"}, false},
		{"escaping log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "../x"}, false},
		{"log path is the log dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "."}, false},
		{"log path is a dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "c/"}, false},
		{"group without user", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}})}, false},
		{"group with user", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}, RunAsUser: &runtimeapi.Int64Value{Value: 1}})}, true},
		{"group with username", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}, RunAsUsername: "www-data"})}, true},
		{"plain", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "c/0.log"}, true},
		// What runc or conmon would refuse after the container's storage
		// is made (found by TestCRIFuzz).
		{"NUL in the log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "a\x00b"}, false},
		{"empty program name", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Command: []string{""}}, false},
		{"NUL in an arg", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Args: []string{"a\x00b"}}, false},
		{"NUL in an env value", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("\x00")}}}, false},
		{"env value not UTF-8", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte{0xff, 'a'}}}}, false},
		{"env value UTF-8 bytes", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("é=x")}}}, true},
		{"relative working dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, WorkingDir: "work"}, false},
		{"absolute working dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, WorkingDir: "/work"}, true},
		{"cpu shares out of range", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1 << 31}}}, false},
		{"memory limit too low", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 65536}}}, false},
		{"resources", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}}}, true},
	} {
		if err := CheckContainerConfig(tc.cfg); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func validContainerConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c", Attempt: 1},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"/bin/sh"},
		LogPath:  "c/1.log",
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}},
	}
}

// Every refusal the server made of a container config, before anything
// was made or while it built the spec, with its code and message.
func TestCheckContainerConfigRefuses(t *testing.T) {
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name string
		mod  func(*runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig
		want string // the message, without ": invalid argument"
	}{
		{"nil", func(*runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { return nil }, "container config is required"},
		{"no metadata", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.Metadata = nil; return c }, "container metadata name is required"},
		{"no name", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.Metadata.Name = ""; return c }, "container metadata name is required"},
		{"name with a slash", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.Metadata.Name = "a/b"; return c }, `container name "a/b" is not valid`},
		{"name too long", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
			c.Metadata.Name = strings.Repeat("n", 254)
			return c
		}, `container name "` + strings.Repeat("n", 254) + `" is not valid`},
		{"no image", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.Image = nil; return c }, "container image is required"},
		{"sub path without an image", mount(&runtimeapi.Mount{ContainerPath: "/m", HostPath: "/h", ImageSubPath: "x"}), `mount at "/m": image_sub_path "x" without an image`},
		{"host path and image", mount(&runtimeapi.Mount{ContainerPath: "/m", HostPath: "/h", Image: &runtimeapi.ImageSpec{Image: "img"}}), `mount at "/m": host_path and image are mutually exclusive`},
		{"image volume at a relative path", mount(&runtimeapi.Mount{ContainerPath: "m", Image: &runtimeapi.ImageSpec{Image: "img"}}), `image volume img: container path "m" must be absolute`},
		{"sub path with NUL", mount(&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "img"}, ImageSubPath: "a\x00"}), `image_sub_path "a\x00" contains a NUL byte`},
		{"absolute sub path", mount(&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "img"}, ImageSubPath: "/a"}), `image_sub_path "/a" must be relative`},
		{"escaping sub path", mount(&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "img"}, ImageSubPath: "a/../.."}), `image_sub_path "a/../.." must not contain '..'`},
		{"group without user", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
			c.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 1}
			return c
		}, "run_as_group is set without run_as_user or run_as_username"},
		{"empty program name", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.Command = []string{""}; return c }, `command [""]: the program name is empty`},
		{"relative working dir", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.WorkingDir = "w"; return c }, `working directory "w" must be an absolute path without NUL bytes`},
		{"unknown stop signal", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.StopSignal = 999; return c }, "stop_signal 999 is not a signal this runtime knows"},
		{"mount option", mount(&runtimeapi.Mount{ContainerPath: "/m", HostPath: "/h", MountOptions: []string{"exec"}}), `mount option "exec" is not supported (supported: ` + fmtList(specgen.MountOptionsAllowed) + `)`},
		{"CDI device name", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "bad"}}
			return c
		}, `CDI device "bad" (CDI_devices): `},
		{"cpu shares", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
			c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 1 << 31}
			return c
		}, "cpu shares 2147483648 outside [2, 262144]"},
		{"NUL in the log path", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.LogPath = "a\x00"; return c }, `log path "a\x00" contains a NUL byte`},
		{"absolute log path", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.LogPath = "/x"; return c }, `log path "/x" must be relative to the pod's log directory`},
		{"escaping log path", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.LogPath = "../x"; return c }, `log path "../x" must be relative to the pod's log directory`},
		{"log path is the log dir", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.LogPath = "."; return c }, `log path "." must name a file in the pod's log directory`},
		{"log path is a dir", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.LogPath = "c/"; return c }, `log path "c/" must name a file in the pod's log directory`},
		{"log name too long", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig { c.LogPath = "c/" + long; return c }, `log path "c/` + long[:62] + `"...: a name longer than 255 bytes`},
		{"relative mount source", mount(&runtimeapi.Mount{ContainerPath: "/m", HostPath: "h"}), "mount h:/m: paths must be absolute"},
		{"relative mount destination", mount(&runtimeapi.Mount{ContainerPath: "m", HostPath: "/h"}), "mount /h:m: paths must be absolute"},
		{"relative seccomp profile", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "p.json"}
			return c
		}, `seccomp profile "p.json" must be an absolute path`},
		{"apparmor_profile of no known form", func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
			//lint:ignore SA1019 the deprecated field is what older kubelets send
			c.Linux.SecurityContext.ApparmorProfile = "p3"
			return c
		}, `apparmor_profile "p3": want runtime/default, unconfined or localhost/<name>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckContainerConfig(tc.mod(validContainerConfig()))
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("CheckContainerConfig: %v, want InvalidArgument", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.want) || !strings.HasSuffix(msg, ": invalid argument") {
				t.Errorf("message %q, want %q", msg, tc.want)
			}
		})
	}
	if err := CheckContainerConfig(validContainerConfig()); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func mount(m *runtimeapi.Mount) func(*runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
	return func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
		c.Mounts = append(c.Mounts, m)
		return c
	}
}

func fmtList(s []string) string { return "[" + strings.Join(s, " ") + "]" }

// What each field of a container config gives in the container's
// description and the specgen requests made from it.
func TestContainerConversion(t *testing.T) {
	pod, err := FromSandboxConfig(podConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Security.Privileged = true
	for _, tc := range []struct {
		name  string
		mod   func(*runtimeapi.ContainerConfig)
		check func(t *testing.T, c *Container, desc specgen.Container)
	}{
		{"process", func(c *runtimeapi.ContainerConfig) {
			c.Args = []string{"-c", "true"}
			c.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("é=1")}}
			c.WorkingDir, c.Tty = "/w", true
		}, func(t *testing.T, c *Container, d specgen.Container) {
			if !reflect.DeepEqual(d.Command, []string{"/bin/sh"}) || !reflect.DeepEqual(d.Args, []string{"-c", "true"}) ||
				!reflect.DeepEqual(d.Env, []specgen.KeyValue{{Key: "A", Value: "é=1"}}) || d.WorkingDir != "/w" || !d.Tty || d.Name != "c" {
				t.Errorf("process: %+v", d)
			}
		}},
		{"the pod's parts", func(*runtimeapi.ContainerConfig) {}, func(t *testing.T, c *Container, d specgen.Container) {
			if d.Hostname != "web" || !reflect.DeepEqual(d.Security.Sysctls, pod.Sysctls) || !d.Sandbox.Privileged ||
				d.Sandbox.UserNS != pod.UserNS || c.UserNS != pod.UserNS {
				t.Errorf("pod's parts: %+v", d)
			}
		}},
		{"no resources", func(*runtimeapi.ContainerConfig) {}, func(t *testing.T, c *Container, d specgen.Container) {
			if c.Resources != nil || !reflect.DeepEqual(d.Resources, specgen.Resources{}) {
				t.Errorf("resources %+v, description's %+v", c.Resources, d.Resources)
			}
		}},
		{"resources", func(c *runtimeapi.ContainerConfig) {
			c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 64 << 20,
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}}
		}, func(t *testing.T, c *Container, d specgen.Container) {
			if d.Resources.CPUShares != 512 || d.Resources.MemoryLimit != 64<<20 || d.Resources.HugepageLimits["2MB"] != 4<<20 {
				t.Errorf("resources: %+v", d.Resources)
			}
		}},
		{"security", func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
				Privileged: true, ReadonlyRootfs: true, NoNewPrivs: true,
				Capabilities:     &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}},
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "t1", Ipc: runtimeapi.NamespaceMode_NODE},
			}
		}, func(t *testing.T, c *Container, d specgen.Container) {
			s := d.Security
			if !s.Privileged || !s.ReadonlyRootfs || !s.NoNewPrivs || !reflect.DeepEqual(s.CapAdd, []string{"NET_ADMIN"}) ||
				!reflect.DeepEqual(s.CapDrop, []string{"ALL"}) || s.Namespaces.Pid != specgen.NamespaceTarget ||
				s.Namespaces.Ipc != specgen.NamespaceNode || c.Security.TargetID != "t1" || s.Namespaces.TargetPID != 0 {
				t.Errorf("security: %+v, target %q", s, c.Security.TargetID)
			}
		}},
		{"default masked paths", func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.MaskedPaths, c.Linux.SecurityContext.ReadonlyPaths = []string{"/proc/kcore"}, []string{"/proc/sys"}
		}, func(t *testing.T, c *Container, d specgen.Container) {
			// The kubelet's lists for procMount Default; no lists in this
			// user-namespaced pod would be Unmasked (TestContainerProcMountUnmasked).
			if !reflect.DeepEqual(d.Security.MaskedPaths, []string{"/proc/kcore"}) || !reflect.DeepEqual(d.Security.ReadonlyPaths, []string{"/proc/sys"}) {
				t.Errorf("masked %v, read-only %v; want the request's", d.Security.MaskedPaths, d.Security.ReadonlyPaths)
			}
		}},
		{"unmasked", func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.MaskedPaths = []string{} }, func(t *testing.T, c *Container, d specgen.Container) {
			// The pod has a user namespace (TestContainerProcMountUnmasked).
			if d.Security.MaskedPaths == nil || len(d.Security.MaskedPaths) != 0 || d.Security.ReadonlyPaths == nil {
				t.Errorf("masked %v, read-only %v; want none (empty)", d.Security.MaskedPaths, d.Security.ReadonlyPaths)
			}
		}},
		{"no seccomp profile", func(*runtimeapi.ContainerConfig) {}, func(t *testing.T, c *Container, d specgen.Container) {
			if d.Security.Seccomp.Type != specgen.ProfileUnconfined || d.Security.AppArmor.Type != specgen.ProfileRuntimeDefault {
				t.Errorf("seccomp %v, apparmor %v", d.Security.Seccomp, d.Security.AppArmor)
			}
		}},
		{"localhost seccomp profile", func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p.json"}
		}, func(t *testing.T, c *Container, d specgen.Container) {
			// The file is the server's to read.
			if c.Security.Seccomp != (Seccomp{Type: specgen.ProfileLocalhost, LocalhostRef: "/p.json"}) ||
				d.Security.Seccomp.Type != specgen.ProfileLocalhost || d.Security.Seccomp.Localhost != nil {
				t.Errorf("seccomp %+v, description's %+v", c.Security.Seccomp, d.Security.Seccomp)
			}
		}},
		{"apparmor", func(c *runtimeapi.ContainerConfig) {
			//lint:ignore SA1019 the deprecated field is what older kubelets send
			c.Linux.SecurityContext.ApparmorProfile = "localhost/p"
		}, func(t *testing.T, c *Container, d specgen.Container) {
			if d.Security.AppArmor != (specgen.AppArmorProfile{Type: specgen.ProfileLocalhost, Localhost: "p"}) {
				t.Errorf("apparmor %+v", d.Security.AppArmor)
			}
		}},
		{"user", func(c *runtimeapi.ContainerConfig) {
			sc := c.Linux.SecurityContext
			sc.RunAsUser, sc.RunAsGroup, sc.RunAsUsername = &runtimeapi.Int64Value{Value: 7}, &runtimeapi.Int64Value{Value: 8}, "www"
			sc.SupplementalGroups = []int64{9}
			sc.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		}, func(t *testing.T, c *Container, d specgen.Container) {
			u := c.User("1:1")
			if u.ImageUser != "1:1" || u.RunAsUsername != "www" || *u.RunAsUser != 7 || *u.RunAsGroup != 8 ||
				!reflect.DeepEqual(u.SupplementalGroups, []int64{9}) || !u.StrictSupplementalGroups {
				t.Errorf("user request: %+v", u)
			}
		}},
		{"mounts, devices, CDI devices, stop signal", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{
				{ContainerPath: "/m", HostPath: "/h", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, MountOptions: []string{"nosuid"}},
				{ContainerPath: "/i", Image: &runtimeapi.ImageSpec{Image: "img"}, ImageSubPath: "sub"},
			}
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: "rwm"}}
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=0"}}
			c.Annotations = map[string]string{"cdi.k8s.io/x": "vendor.com/gpu=1"}
			c.StopSignal = runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3
		}, func(t *testing.T, c *Container, d specgen.Container) {
			want := []Mount{
				{ContainerPath: "/m", HostPath: "/h", Readonly: true, Propagation: "PROPAGATION_BIDIRECTIONAL", Options: []string{"nosuid"}},
				{ContainerPath: "/i", Propagation: "PROPAGATION_PRIVATE", Image: "img", ImageSubPath: "sub"},
			}
			if !reflect.DeepEqual(c.Mounts, want) || c.Mounts[0].SpecPropagation() != specgen.PropagationBidirectional ||
				c.Mounts[1].SpecPropagation() != specgen.PropagationPrivate || c.Mounts[0].IsImageVolume() || !c.Mounts[1].IsImageVolume() || !c.HasBindMounts() {
				t.Errorf("mounts: %+v", c.Mounts)
			}
			// Host paths are the server's to look up.
			if d.Mounts != nil || d.Devices != nil || !reflect.DeepEqual(c.Devices, []Device{{"/dev/fuse", "/dev/fuse", "rwm"}}) {
				t.Errorf("devices %+v; description's mounts %v, devices %v", c.Devices, d.Mounts, d.Devices)
			}
			if !reflect.DeepEqual(c.CDIDevices, []string{"vendor.com/gpu=0", "vendor.com/gpu=1"}) || c.StopSignal != "SIGRTMIN+3" {
				t.Errorf("CDI devices %v, stop signal %q", c.CDIDevices, c.StopSignal)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validContainerConfig()
			tc.mod(cfg)
			if err := CheckContainerConfig(cfg); err != nil {
				t.Fatal(err)
			}
			c, err := FromContainerConfig(cfg, pod)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c, c.Spec(pod))

			// Stored as JSON, read back the same.
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			var back Container
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&back, c) {
				t.Errorf("JSON round trip:\n got %+v\nwant %+v", &back, c)
			}
		})
	}
}

// A container restored from a checkpoint runs the checkpointed process;
// the request is not changed.
func TestRestoredConfig(t *testing.T) {
	cfg := validContainerConfig()
	cfg.Args = []string{"x"}
	out := RestoredConfig(cfg, Checkpointed{Image: "busybox:1", Args: []string{"/count"}, WorkingDir: "/w", Terminal: true, Env: []string{"A=b=c", "B"}})
	c := ContainerOf(out)
	if c.Image != "busybox:1" || !reflect.DeepEqual(c.Command, []string{"/count"}) || c.Args != nil || c.WorkingDir != "/w" || !c.Tty ||
		!reflect.DeepEqual(c.Env, []specgen.KeyValue{{Key: "A", Value: "b=c"}, {Key: "B"}}) || c.Name != "c" {
		t.Errorf("restored: %+v", c)
	}
	if cfg.GetImage().GetImage() != "busybox" || cfg.Args[0] != "x" {
		t.Errorf("the request changed: %v", cfg)
	}
}

// procMount Unmasked reaches the runtime as no lists (the kubelet's empty
// ones, through proto3): in a pod with a user namespace that is no
// masked or read-only path; in a pod of the host's users, the defaults;
// the kubelet's Default lists are kept as sent.
func TestContainerProcMountUnmasked(t *testing.T) {
	userns, err := FromSandboxConfig(podConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	userns.UserNS = &specgen.UserNamespace{UIDs: specs.LinuxIDMapping{HostID: 100000, Size: 65536}, GIDs: specs.LinuxIDMapping{HostID: 100000, Size: 65536}}
	hostUsers := *userns
	hostUsers.UserNS = nil
	for _, tc := range []struct {
		name             string
		pod              *Pod
		masked, readonly []string
		wantMasked       []string // nil: the defaults
	}{
		{"unmasked", userns, nil, nil, []string{}},
		{"default", userns, []string{"/proc/kcore"}, []string{"/proc/sys"}, []string{"/proc/kcore"}},
		{"no lists, host users", &hostUsers, nil, nil, nil},
		{"empty lists, host users", &hostUsers, []string{}, []string{}, nil},
	} {
		cfg := validContainerConfig()
		cfg.Linux.SecurityContext.NamespaceOptions = nil
		cfg.Linux.SecurityContext.MaskedPaths, cfg.Linux.SecurityContext.ReadonlyPaths = tc.masked, tc.readonly
		c, err := FromContainerConfig(cfg, tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Security.MaskedPaths; (got == nil) != (tc.wantMasked == nil) || !reflect.DeepEqual(got, tc.wantMasked) {
			t.Errorf("%s: masked %#v, want %#v", tc.name, got, tc.wantMasked)
		}
		if (c.Security.ReadonlyPaths == nil) != (tc.wantMasked == nil) {
			t.Errorf("%s: read-only %#v", tc.name, c.Security.ReadonlyPaths)
		}
	}
}
