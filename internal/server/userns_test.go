package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/idtools"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/ocifeatures"
)

// usernsOptions is what the kubelet sends for hostUsers: false.
func usernsOptions() *runtimeapi.UserNamespace {
	return &runtimeapi.UserNamespace{
		Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 196608, Length: 65536}},
		Gids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 196608, Length: 65536}},
	}
}

func withUserns(cfg *runtimeapi.PodSandboxConfig, u *runtimeapi.UserNamespace) *runtimeapi.PodSandboxConfig {
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{}
	}
	if cfg.Linux.SecurityContext.NamespaceOptions == nil {
		cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u
	return cfg
}

func TestRunPodSandboxUserNamespaceRefusals(t *testing.T) {
	e := newTestEnv(t, "")
	mod := func(f func(u *runtimeapi.UserNamespace)) *runtimeapi.UserNamespace {
		u := usernsOptions()
		f(u)
		return u
	}
	for _, tc := range []struct {
		name string
		u    *runtimeapi.UserNamespace
		want string
	}{
		// This handler has no user namespaces: refused, naming it.
		{"unsupported handler", usernsOptions(), `runtime handler "runc"`},
		{"pod mode without mappings", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}, "one uid and one gid mapping"},
		{"two uid ranges", mod(func(u *runtimeapi.UserNamespace) {
			u.Uids = append(u.Uids, &runtimeapi.IDMapping{ContainerId: 65536, HostId: 300000, Length: 10})
		}), "one uid and one gid mapping"},
		{"no gid range", mod(func(u *runtimeapi.UserNamespace) { u.Gids = nil }), "one uid and one gid mapping"},
		{"empty range", mod(func(u *runtimeapi.UserNamespace) { u.Uids[0].Length = 0 }), "size 0"},
		{"range past the last ID", mod(func(u *runtimeapi.UserNamespace) { u.Gids[0].HostId = 1<<32 - 10 }), "past the last ID"},
		{"container mode", mod(func(u *runtimeapi.UserNamespace) { u.Mode = runtimeapi.NamespaceMode_CONTAINER }), "only POD and NODE"},
		{"target mode", mod(func(u *runtimeapi.UserNamespace) { u.Mode = runtimeapi.NamespaceMode_TARGET }), "only POD and NODE"},
		{"node mode with mappings", mod(func(u *runtimeapi.UserNamespace) { u.Mode = runtimeapi.NamespaceMode_NODE }), "mode NODE with ID mappings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.run(t, withUserns(podConfig("userns"), tc.u))
			wantStatus(t, "RunPodSandbox", err, codes.InvalidArgument)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to say %q", err, tc.want)
			}
			e.assertNothingHeld(t)
		})
	}
	// Mode NODE is the host's user namespace: allowed everywhere.
	id := e.mustRun(t, withUserns(podConfig("host-users"), &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}))
	s := e.bundleSpec(t, id)
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.UserNamespace {
			t.Errorf("mode NODE pod has a user namespace: %v", s.Linux.Namespaces)
		}
	}
}

func TestUserNamespacePod(t *testing.T) {
	e := newTestEnv(t, "")
	e.setFeatures(t, ocifeatures.Handler{UserNamespaces: true})
	podID := e.mustRun(t, withUserns(podConfig("userns"), usernsOptions()))
	want := specs.LinuxIDMapping{ContainerID: 0, HostID: 196608, Size: 65536}
	wantMap := []idtools.IDMap{{ContainerID: 0, HostID: 196608, Size: 65536}}

	s := e.bundleSpec(t, podID)
	i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
	if i < 0 || s.Linux.Namespaces[i].Path != "" {
		t.Fatalf("sandbox namespaces %v: want a new user namespace", s.Linux.Namespaces)
	}
	if !slices.Equal(s.Linux.UIDMappings, []specs.LinuxIDMapping{want}) || !slices.Equal(s.Linux.GIDMappings, []specs.LinuxIDMapping{want}) {
		t.Errorf("sandbox mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	e.img.mu.Lock()
	opts := e.img.rootfsOpts[podID]
	e.img.mu.Unlock()
	if !slices.Equal(opts.UIDMap, wantMap) || !slices.Equal(opts.GIDMap, wantMap) {
		t.Errorf("sandbox rootfs options %+v: want the pod's mappings", opts)
	}

	// A container joins the pause process's user namespace; its volume is
	// an idmapped mount and its rootfs is made for the mappings.
	if _, err := e.img.ImportFromFiles(context.Background(), "busybox", nil, image.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	sbCfg := withUserns(podConfig("userns"), usernsOptions())
	cfg := containerConfig("c")
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data"}}
	cresp, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		t.Fatal(err)
	}
	cs := e.bundleSpec(t, cresp.ContainerId)
	i = slices.IndexFunc(cs.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
	if i < 0 || cs.Linux.Namespaces[i].Path != "/proc/4242/ns/user" {
		t.Fatalf("container namespaces %v: want the pause process's user namespace", cs.Linux.Namespaces)
	}
	if !slices.Equal(cs.Linux.UIDMappings, []specs.LinuxIDMapping{want}) {
		t.Errorf("container uid mappings %v", cs.Linux.UIDMappings)
	}
	j := slices.IndexFunc(cs.Mounts, func(m specs.Mount) bool { return m.Destination == "/data" })
	if j < 0 || !slices.Equal(cs.Mounts[j].UIDMappings, []specs.LinuxIDMapping{want}) || !slices.Equal(cs.Mounts[j].GIDMappings, []specs.LinuxIDMapping{want}) {
		t.Errorf("container mounts %v: want /data idmapped", cs.Mounts)
	}
	e.img.mu.Lock()
	opts = e.img.rootfsOpts[cresp.ContainerId]
	e.img.mu.Unlock()
	if !slices.Equal(opts.UIDMap, wantMap) {
		t.Errorf("container rootfs options %+v", opts)
	}

	// A container cannot ask for another user namespace than its pod's.
	other := containerConfig("other")
	other.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}},
	}}
	before := e.rt.count()
	_, err = call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: other, SandboxConfig: sbCfg})
	wantStatus(t, "container on the host's users in a userns pod", err, codes.InvalidArgument)
	if e.rt.count() != before {
		t.Error("a refused container was left in the runtime")
	}
}
