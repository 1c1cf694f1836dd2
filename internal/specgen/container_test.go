package specgen

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
)

// testContainer is a plain container in a pod with its own network.
func testContainer() Container {
	return Container{
		ID:   "c1",
		Name: "app",
		Sandbox: SandboxRef{
			ID: "sb1", Name: "web", Namespace: "default", UID: "u1",
			NetNSPath: "/var/run/netns/podbay-sb1", PID: 4242, CgroupParent: "/kubepods/pod-u1",
		},
		Image:      ImageRef{Name: "registry.k8s.io/e2e-test-images/busybox:1.29-2", Cmd: []string{"sh"}},
		RootfsPath: "/var/lib/podbay/containers/c1/rootfs",
		Hostname:   "web",
	}
}

func mustSpec(t *testing.T, c Container, host Host) *specs.Spec {
	t.Helper()
	s, err := ContainerSpec(c, host)
	if err != nil {
		t.Fatalf("ContainerSpec: %v", err)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatalf("spec does not marshal: %v", err)
	}
	return s
}

func TestContainerSpecRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Container)
	}{
		{"no id", func(c *Container) { c.ID = "" }},
		{"no rootfs", func(c *Container) { c.RootfsPath = "" }},
		{"no sandbox id", func(c *Container) { c.Sandbox.ID = "" }},
		{"privileged in unprivileged sandbox", func(c *Container) { c.Security.Privileged = true }},
		{"no command", func(c *Container) { c.Image.Cmd = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			tc.mod(&c)
			_, err := ContainerSpec(c, Host{})
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v, want an invalid argument", err)
			}
		})
	}
}

func TestContainerSpecAnnotations(t *testing.T) {
	c := testContainer()
	c.Annotations = map[string]string{
		"pod.example/owner":       "team-a",
		annotations.ContainerType: annotations.ContainerTypeSandbox, // spoofed: ours wins
		annotations.SandboxID:     "other",
	}
	s := mustSpec(t, c, Host{})
	want := map[string]string{
		"pod.example/owner":          "team-a",
		annotations.ContainerType:    annotations.ContainerTypeContainer,
		annotations.SandboxID:        "sb1",
		annotations.SandboxName:      "web",
		annotations.SandboxNamespace: "default",
		annotations.SandboxUID:       "u1",
		annotations.ContainerName:    "app",
		annotations.ImageName:        "registry.k8s.io/e2e-test-images/busybox:1.29-2",
	}
	if len(s.Annotations) != len(want) {
		t.Errorf("annotations %v, want %v", s.Annotations, want)
	}
	for k, v := range want {
		if s.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, s.Annotations[k], v)
		}
	}
	if c.Annotations[annotations.SandboxID] != "other" {
		t.Error("ContainerSpec changed the caller's annotations")
	}
}

func TestContainerSpecRootAndPaths(t *testing.T) {
	custom := []string{"/proc/custom"}
	for _, tc := range []struct {
		name                  string
		mod                   func(*Container)
		readonly              bool
		masked, readonlyPaths []string
	}{
		{"defaults", func(*Container) {}, false, defaultMaskedPaths(), defaultReadonlyPaths()},
		{"readonly rootfs", func(c *Container) { c.Security.ReadonlyRootfs = true }, true, defaultMaskedPaths(), defaultReadonlyPaths()},
		{"unmasked", func(c *Container) { c.Security.MaskedPaths, c.Security.ReadonlyPaths = []string{}, []string{} }, false, []string{}, []string{}},
		{"custom", func(c *Container) { c.Security.MaskedPaths, c.Security.ReadonlyPaths = custom, custom }, false, custom, custom},
		{"privileged", func(c *Container) {
			c.Sandbox.Privileged, c.Security.Privileged = true, true
			c.Security.MaskedPaths = custom
		}, false, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			tc.mod(&c)
			s := mustSpec(t, c, Host{})
			if s.Root.Path != c.RootfsPath || s.Root.Readonly != tc.readonly {
				t.Errorf("root %+v, want %s readonly=%v", s.Root, c.RootfsPath, tc.readonly)
			}
			if !slices.Equal(s.Linux.MaskedPaths, tc.masked) || (s.Linux.MaskedPaths == nil) != (tc.masked == nil) {
				t.Errorf("masked paths %#v, want %#v", s.Linux.MaskedPaths, tc.masked)
			}
			if !slices.Equal(s.Linux.ReadonlyPaths, tc.readonlyPaths) || (s.Linux.ReadonlyPaths == nil) != (tc.readonlyPaths == nil) {
				t.Errorf("readonly paths %#v, want %#v", s.Linux.ReadonlyPaths, tc.readonlyPaths)
			}
		})
	}
}

func TestContainerSpecProcess(t *testing.T) {
	c := testContainer()
	c.Tty = true
	c.User = ResolvedUser{UID: 1000, GID: 1000, AdditionalGids: []uint32{10, 1000}}
	c.Security.NoNewPrivs = true
	c.WorkingDir = "/work"
	c.Env = []KeyValue{{"A", "1"}}
	s := mustSpec(t, c, Host{})
	p := s.Process
	if !p.Terminal || !p.NoNewPrivileges || p.Cwd != "/work" {
		t.Errorf("terminal %v, no_new_privs %v, cwd %q", p.Terminal, p.NoNewPrivileges, p.Cwd)
	}
	if p.User.UID != 1000 || p.User.GID != 1000 || !slices.Equal(p.User.AdditionalGids, []uint32{10, 1000}) {
		t.Errorf("user %+v", p.User)
	}
	if !slices.Equal(p.Args, []string{"sh"}) {
		t.Errorf("args %q", p.Args)
	}
	if !slices.Equal(p.Env, []string{defaultPath, "HOSTNAME=web", "A=1"}) {
		t.Errorf("env %q", p.Env)
	}
	if p.Rlimits != nil {
		t.Errorf("rlimits %v: the host cannot raise them", p.Rlimits)
	}
	if s.Hostname != "" {
		t.Errorf("hostname %q: a container joins the sandbox's UTS namespace", s.Hostname)
	}
	if s.Linux.CgroupsPath != "/kubepods/pod-u1/podbay-c1" {
		t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
	}
}

func TestSandboxSpecUnchangedByContainerDefaults(t *testing.T) {
	s, err := SandboxSpec(base())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys/fs/cgroup" {
			t.Error("sandbox spec gained the containers' cgroup mount")
		}
	}
	if !slices.Equal(s.Process.Env, []string{defaultPath}) {
		t.Errorf("sandbox env %q", s.Process.Env)
	}
}
