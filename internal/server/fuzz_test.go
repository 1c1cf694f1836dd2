package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
	"github.com/podbay/podbay/internal/store"
)

// The fuzz targets decode the fuzz input as the request's protobuf, as
// gRPC would, and run what the server does with it before touching the
// host: validation, and the translation into the OCI spec. Seeds are
// valid and invalid requests, marshalled.

// fuzzServer is a server on fakes, with no pod and no container.
func fuzzServer(f *testing.F) *Server {
	dir := f.TempDir()
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "root")
	cfg.State = filepath.Join(dir, "state")
	cfg.NetNSDir = filepath.Join(dir, "netns")
	cfg.Runtimes = map[string]config.Runtime{"runc": {Path: "/bin/true"}}
	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "podbay.db"))
	if err != nil {
		f.Fatal(err)
	}
	minScore := -500
	srv, err := New(Options{
		Config: cfg, DB: db, Network: newFakeNetwork(), NetNS: newFakeNetNS(),
		Runtimes:       map[string]runtime.Runtime{"runc": newFakeRuntime()},
		Unavailable:    map[string]error{"kata": errors.New("shim not found")},
		Images:         newFakeImages(filepath.Join(dir, "rootfs")),
		Host:           specgen.Host{Capabilities: []string{"CAP_CHOWN", "CAP_KILL", "CAP_SYS_ADMIN"}, MinOOMScoreAdj: &minScore},
		MinOOMScoreAdj: &minScore,
	})
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Recover(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		srv.Shutdown(context.Background())
		db.Close()
	})
	return srv
}

func addProto(f *testing.F, msgs ...proto.Message) {
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// wantCode fails unless err maps to one of codes.
func wantCode(t *testing.T, err error, allowed ...codes.Code) {
	t.Helper()
	if c := errdefs.Code(err); !slices.Contains(allowed, c) {
		t.Fatalf("error %v has code %s, want one of %v", err, c, allowed)
	}
}

func fuzzPodConfig() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/web",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"svc.cluster.local"}},
		PortMappings: []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080}},
		Labels:       map[string]string{"app": "web"},
		Annotations:  map[string]string{annotations.NetworkOrder: "after"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/pod-u1",
			Sysctls:      map[string]string{"net.ipv4.ip_forward": "1"},
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				RunAsUser:          &runtimeapi.Int64Value{Value: 65535},
				SupplementalGroups: []int64{5},
				NamespaceOptions:   &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 1 << 28},
		},
	}
}

// FuzzRunPodSandbox: a RunPodSandboxRequest is either refused by
// validation, or by the handler lookup, with InvalidArgument, or its
// config turns into a record and a pause container spec without panic:
// the spec then joins the sandbox key (own network) or none (host
// network), and refuses only with InvalidArgument.
func FuzzRunPodSandbox(f *testing.F) {
	srv := fuzzServer(f)
	valid := fuzzPodConfig()
	host := proto.CloneOf(valid)
	host.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}
	badUser := proto.CloneOf(valid)
	badUser.Linux.SecurityContext.RunAsUser.Value = -1
	traversal := proto.CloneOf(valid)
	traversal.Metadata.Name = "../../etc"
	ports := proto.CloneOf(valid)
	ports.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: -1, HostPort: 70000}}
	target := proto.CloneOf(valid)
	target.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_TARGET
	addProto(f,
		&runtimeapi.RunPodSandboxRequest{Config: valid},
		&runtimeapi.RunPodSandboxRequest{Config: host, RuntimeHandler: "runc"},
		&runtimeapi.RunPodSandboxRequest{Config: valid, RuntimeHandler: "kata"},
		&runtimeapi.RunPodSandboxRequest{Config: valid, RuntimeHandler: "nope"},
		&runtimeapi.RunPodSandboxRequest{Config: badUser},
		&runtimeapi.RunPodSandboxRequest{Config: traversal},
		&runtimeapi.RunPodSandboxRequest{Config: ports},
		&runtimeapi.RunPodSandboxRequest{Config: target},
		&runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}},
		&runtimeapi.RunPodSandboxRequest{},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req runtimeapi.RunPodSandboxRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		cfg := req.GetConfig()
		if err := validateSandboxConfig(cfg); err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		md := cfg.GetMetadata()
		for _, v := range []string{md.GetName(), md.GetNamespace(), md.GetUid()} {
			if v == "" || strings.ContainsAny(v, "/\x00") {
				t.Fatalf("validation let metadata %q through", v)
			}
		}
		handler := req.GetRuntimeHandler()
		if handler == "" {
			handler = srv.cfg.DefaultRuntime
		}
		if _, err := srv.runtimeFor(handler); err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		id := strings.Repeat("ab", 32)
		pod, err := podrequest.FromSandboxConfig(cfg, podrequest.Options{RuntimeHandler: handler})
		if err != nil {
			t.Fatalf("request of a valid config: %v", err)
		}
		rec, err := srv.newRecord(id, sandboxName(pod.Metadata), pod, cfg)
		if err != nil {
			t.Fatalf("record of a valid config: %v", err)
		}
		dir := filepath.Join("/var/lib/podbay/sandboxes", id)
		files := sandboxFiles{
			ResolvConf: filepath.Join(dir, "resolv.conf"), Hostname: filepath.Join(dir, "hostname"),
			Hosts: filepath.Join(dir, "hosts"), HostnameValue: cfg.GetHostname(),
		}
		spec, err := srv.sandboxSpec(podsandbox.NewPause(nil), rec, pod, files, podsandbox.Plan{Args: []string{"/pause"}}, "/rootfs")
		if err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		checkPodNetwork(t, spec, rec)
	})
}

func checkPodNetwork(t *testing.T, spec *specs.Spec, rec sandbox.Record) {
	t.Helper()
	var netns []specs.LinuxNamespace
	for _, n := range spec.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			netns = append(netns, n)
		}
	}
	switch {
	case rec.NetworkMode == sandbox.ModeHost && len(netns) != 0:
		t.Fatalf("host-network pod with network namespaces %v", netns)
	case rec.NetworkMode == sandbox.ModeCNI && (len(netns) != 1 || netns[0].Path != rec.NetworkSettings.SandboxKey || rec.NetworkSettings.SandboxKey == ""):
		t.Fatalf("pod network namespaces %v, want the sandbox key %q", netns, rec.NetworkSettings.SandboxKey)
	}
	if spec.Annotations[annotations.SandboxID] != rec.ID {
		t.Fatalf("sandbox-id annotation %q", spec.Annotations[annotations.SandboxID])
	}
}

// FuzzCreateContainer: a CreateContainerRequest is refused by validation
// with InvalidArgument, or its config, in a ready pod, turns into an OCI
// spec without panic, or is refused with InvalidArgument,
// FailedPrecondition or NotFound (an unclassified error would reach the
// kubelet as Unknown). Host paths (mounts, devices, seccomp profiles) are
// taken inside a scratch directory, so the target reads no host file it
// was not meant to.
func FuzzCreateContainer(f *testing.F) {
	srv := fuzzServer(f)
	scratch := f.TempDir()
	rootfs := filepath.Join(scratch, "rootfs")
	for _, d := range []string{"rootfs/etc", "data", "logs"} {
		if err := os.MkdirAll(filepath.Join(scratch, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		"rootfs/etc/passwd": "root:x:0:0:root:/root:/bin/sh\nwww:x:33:33::/var/www:/bin/false\n",
		"rootfs/etc/group":  "root:x:0:\nwww:x:33:\nextra:x:50:www\n",
		"seccomp.json":      `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"}]}`,
		"bad-seccomp.json":  `{"defaultAction":"SCMP_ACT_BOGUS"}`,
		"file":              "x",
	} {
		if err := os.WriteFile(filepath.Join(scratch, name), []byte(content), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink("data", filepath.Join(scratch, "link")); err != nil {
		f.Fatal(err)
	}
	img := &image.Image{ID: strings.Repeat("cd", 32), Config: image.ImageConfig{
		Cmd: []string{"sh"}, Env: []string{"PATH=/bin", "A=1"}, User: "www", WorkingDir: "/w",
	}}
	sbRec := sandbox.Record{
		ID: strings.Repeat("ab", 32), Metadata: sandbox.Metadata{Name: "web", Namespace: "default", UID: "u1"},
		Phase: sandbox.PhaseReady, RuntimeHandler: "runc", NetworkMode: sandbox.ModeCNI, Pid: 4242,
		Dir: "/var/lib/podbay/sandboxes/sb", CgroupParent: "/podbay",
	}
	sbRec.NetworkSettings.SandboxKey = "/var/run/netns/podbay-sb"

	valid := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sh", "-c"}, Args: []string{"echo hi"},
		Envs: []*runtimeapi.KeyValue{{Key: "B", Value: []byte("2")}},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/data", HostPath: "/data", Readonly: true},
			{ContainerPath: "/logs", HostPath: "/link", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		},
		LogPath: "app/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 1 << 27, OomScoreAdj: 100},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"MKNOD"}},
				RunAsUser:    &runtimeapi.Int64Value{Value: 1000},
				RunAsGroup:   &runtimeapi.Int64Value{Value: 1000},
				Seccomp:      &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/seccomp.json"},
			},
		},
	}
	mod := func(fn func(c *runtimeapi.ContainerConfig)) *runtimeapi.CreateContainerRequest {
		c := proto.CloneOf(valid)
		fn(c)
		return &runtimeapi.CreateContainerRequest{PodSandboxId: sbRec.ID, Config: c}
	}
	addProto(f,
		mod(func(*runtimeapi.ContainerConfig) {}),
		mod(func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "a/b" }),
		mod(func(c *runtimeapi.ContainerConfig) { c.LogPath = "../../etc/passwd" }),
		// TestCRIFuzz: conmon died on a log name longer than NAME_MAX.
		mod(func(c *runtimeapi.ContainerConfig) { c.LogPath = strings.Repeat("y", 4096) }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Mounts[0].HostPath = "relative" }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Mounts[0].HostPath = "/missing" }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Mounts[1].ContainerPath = "/data" }),
		mod(func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/file", ContainerPath: "/dev/x", Permissions: "rwm"}}
		}),
		mod(func(c *runtimeapi.ContainerConfig) { c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: "A=B"}) }),
		mod(func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp.LocalhostRef = "/bad-seccomp.json"
		}),
		mod(func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
			c.Linux.SecurityContext.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "p"}
		}),
		mod(func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.RunAsUser = nil }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.RunAsUser.Value = -5 }),
		mod(func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "nope"}
		}),
		mod(func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.Privileged = true }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Linux.Resources.OomScoreAdj = -2000 }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Linux.Resources.Unified = map[string]string{"memory.high": "1"} }),
		mod(func(c *runtimeapi.ContainerConfig) { c.Command, c.Args = nil, nil }),
		&runtimeapi.CreateContainerRequest{},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req runtimeapi.CreateContainerRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		cfg := req.GetConfig()
		if err := podrequest.CheckContainerConfig(cfg); err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		if n := cfg.GetMetadata().GetName(); n == "" || strings.ContainsAny(n, "/\x00") {
			t.Fatalf("validation let container name %q through", n)
		}
		if lp := cfg.GetLogPath(); filepath.IsAbs(lp) || strings.Contains(lp, "..") ||
			slices.ContainsFunc(strings.Split(lp, "/"), func(n string) bool { return len(n) > 255 }) {
			t.Fatalf("validation let log path %q through", lp)
		}
		// Host paths under the scratch directory.
		cfg = proto.CloneOf(cfg)
		for _, m := range cfg.GetMounts() {
			if filepath.IsAbs(m.HostPath) {
				m.HostPath = filepath.Join(scratch, m.HostPath)
			}
		}
		for _, d := range cfg.GetDevices() {
			d.HostPath = filepath.Join(scratch, d.HostPath)
		}
		if p := cfg.GetLinux().GetSecurityContext().GetSeccomp(); p != nil && filepath.IsAbs(p.LocalhostRef) {
			p.LocalhostRef = filepath.Join(scratch, p.LocalhostRef)
		}
		sbCfg := req.GetSandboxConfig()
		if sbCfg == nil {
			sbCfg = fuzzPodConfig()
		}
		pod, err := podrequest.FromPodConfigCopy(sbCfg, podrequest.Options{})
		if err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		creq, err := podrequest.FromContainerConfig(cfg, pod)
		if err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		rec := container.Record{ID: strings.Repeat("ef", 32), MetaName: cfg.GetMetadata().GetName(), ImageRef: cfg.GetImage().GetImage()}
		spec, err := srv.containerSpec(context.Background(), rec, sbRec, pod, creq, img, rootfs)
		if err != nil {
			wantCode(t, err, codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound)
			return
		}
		if len(spec.Process.Args) == 0 {
			t.Fatal("spec without process args")
		}
		if len(cfg.GetCommand()) > 0 && !slices.Equal(spec.Process.Args[:len(cfg.GetCommand())], cfg.GetCommand()) {
			t.Fatalf("args %q do not start with the command %q", spec.Process.Args, cfg.GetCommand())
		}
	})
}

// FuzzExecSync: with no container, every ExecSyncRequest is refused with
// InvalidArgument (no command, negative timeout) or NotFound, through the
// interceptor, without panic.
func FuzzExecSync(f *testing.F) {
	srv := fuzzServer(f)
	addProto(f,
		&runtimeapi.ExecSyncRequest{ContainerId: "abc", Cmd: []string{"true"}, Timeout: 5},
		&runtimeapi.ExecSyncRequest{ContainerId: "abc", Cmd: []string{"true"}, Timeout: -1},
		&runtimeapi.ExecSyncRequest{ContainerId: "", Cmd: []string{"true"}},
		&runtimeapi.ExecSyncRequest{ContainerId: "../../etc", Cmd: []string{""}, Timeout: 1 << 62},
		&runtimeapi.ExecSyncRequest{ContainerId: "abc"},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req runtimeapi.ExecSyncRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		_, err := call(srv, "ExecSync", srv.ExecSync, &req)
		if err == nil {
			t.Fatal("ExecSync succeeded with no container")
		}
		if c := status.Code(err); c != codes.InvalidArgument && c != codes.NotFound {
			t.Fatalf("ExecSync: %v, want InvalidArgument or NotFound", err)
		}
	})
}
