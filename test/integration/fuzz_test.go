package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIFuzz sends a real daemon random and malformed RunPodSandbox,
// CreateContainer, ExecSync and PullImage requests: mutations of valid
// ones (odd names, bad IDs, out-of-range numbers, bogus mounts, devices,
// sysctls, ports, handlers and image references), and byte-level
// mutations of their protobuf, sent as decoded or, when they no longer
// decode, as raw bytes.
//
// The daemon must stay up with no panic in its log, and every error must
// say the request was wrong, not the daemon:
//   - InvalidArgument, NotFound (an ID, image or repository that does not
//     exist), FailedPrecondition (a container that is not running, a pod
//     that is not ready) and AlreadyExists (a name in use) for every RPC;
//   - Unavailable for PullImage only: a well-formed reference whose
//     registry cannot be reached;
//   - Internal only for bytes that are no protobuf, from gRPC's own
//     decoding ("grpc: error unmarshalling request"), never from podbayd.
//
// Unknown (an unclassified error) and any other code fail the test.
// Accepted requests are fine: their pods and containers are removed as
// they come, and at the end nothing is left on the host.
//
// Known exception, logged and counted: Unknown for a well-formed request
// the OCI runtime refuses (see runtimeRefusal); PODBAY_CRI_FUZZ_STRICT=1
// fails on it too.
//
// PODBAY_CRI_FUZZ_N sets the number of requests (300), PODBAY_CRI_FUZZ_SEED
// the seed (random, logged).
func TestCRIFuzz(t *testing.T) {
	n := envInt(t, "PODBAY_CRI_FUZZ_N", 300)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PODBAY_CRI_FUZZ_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PODBAY_CRI_FUZZ_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("TestCRIFuzz: %d requests, PODBAY_CRI_FUZZ_SEED=%d", n, seed)

	e, ti := newContainerEnv(t, "busybox")
	fz := &criFuzz{e: e, ti: ti, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), counts: map[string]int{},
		strict: os.Getenv("PODBAY_CRI_FUZZ_STRICT") == "1"}
	fz.pod = e.runTestPod(t, "fuzzbase")
	fz.ctr, _ = e.runContainer(t, fz.pod, containerConfig("base", ti.ref("busybox"), ctrShell("sleep 3600")))

	start := time.Now()
	for i := range n {
		fz.one(t, i)
		if t.Failed() {
			t.Fatalf("stopped at request %d; rerun with PODBAY_CRI_FUZZ_SEED=%d", i, seed)
		}
	}
	t.Logf("%d requests in %v: %v", n, time.Since(start).Round(time.Millisecond), fz.counts)

	e.removeContainer(t, fz.ctr)
	for _, p := range e.listPods(t, nil) {
		e.stopPod(t, p.Id)
		e.removePod(t, p.Id)
	}
	if log, err := os.ReadFile(e.logPath); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(log), "panic in RPC") || strings.Contains(string(log), "\npanic: ") {
		t.Errorf("the daemon's log mentions a panic (seed %d):\n%s", seed, e.logTail(80))
	}
	e.assertNoLeaks(t)
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		t.Fatalf("%s=%q: want a count", name, s)
	}
	return v
}

type criFuzz struct {
	e      *env
	ti     testImages
	rng    *rand.Rand
	pod    testPod
	ctr    string
	counts map[string]int // "RPC code" → requests
	strict bool           // runtime refusals fail too
}

// rpcKind is one of the fuzzed RPCs: how to make a valid request, the
// mutations to apply, and how to send one and undo what it made.
type rpcKind struct {
	name    string
	method  string // full gRPC method, for raw sends
	valid   func(i int) proto.Message
	mutate  []func(m proto.Message, i int)
	send    func(ctx context.Context, m proto.Message) (proto.Message, error)
	cleanup func(t *testing.T, resp proto.Message)
	// extra codes this RPC may answer, beyond the common ones.
	extra []codes.Code
}

func (fz *criFuzz) one(t *testing.T, i int) {
	kinds := fz.kinds()
	k := kinds[fz.rng.IntN(len(kinds))]
	msg := k.valid(i)
	for range 1 + fz.rng.IntN(3) {
		k.mutate[fz.rng.IntN(len(k.mutate))](msg, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()

	var resp proto.Message
	var err error
	raw := false
	if fz.rng.IntN(8) == 0 {
		// Byte-level: flip, drop or insert bytes of the encoding.
		b, merr := proto.Marshal(msg)
		if merr != nil {
			t.Fatalf("marshal %s: %v", k.name, merr)
		}
		b = fz.mutateBytes(b)
		decoded := proto.Clone(msg)
		proto.Reset(decoded)
		if proto.Unmarshal(b, decoded) == nil {
			msg = decoded
		} else {
			raw = true
			var out []byte
			err = fz.e.conn.Invoke(ctx, k.method, b, &out, grpc.ForceCodecV2(rawCodec{}))
		}
	}
	if !raw {
		resp, err = k.send(ctx, msg)
	}
	c := status.Code(err)
	fz.counts[k.name+" "+c.String()]++
	if !fz.e.running() {
		t.Fatalf("podbayd died after %s %v (raw %v):\n%s", k.name, msg, raw, fz.e.logTail(60))
	}
	switch {
	case err == nil:
		if resp != nil {
			k.cleanup(t, resp)
		}
	case c == codes.Internal && raw && strings.Contains(status.Convert(err).Message(), "grpc: error unmarshalling request"):
	case slices.Contains([]codes.Code{codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists}, c),
		slices.Contains(k.extra, c):
	case c == codes.Unknown && !fz.strict && runtimeRefusal(err):
		// Known, not fixed here: a well-formed request whose spec the OCI
		// runtime refuses (a sysctl the kernel does not have, a command
		// not in the image) comes back as the runtime's unclassified
		// error. Counted apart (PODBAY_CRI_FUZZ_STRICT=1 fails on it) so
		// that any other Unknown still fails.
		fz.counts[k.name+" Unknown (known: runtime refusal)"]++
		t.Logf("request %d: %s: known runtime refusal: %v", i, k.name, err)
	default:
		t.Errorf("request %d: %s %v (raw %v): %v; want an invalid-argument class code", i, k.name, msg, raw, err)
	}
}

// runtimeRefusal reports whether err is the OCI runtime refusing a
// container's spec or an exec'd command (runc directly, or through a
// shim).
func runtimeRefusal(err error) bool {
	msg := status.Convert(err).Message()
	for _, s := range []string{"runc create failed", "error during container init", "exec failed", "executable file not found", "OCI runtime"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (fz *criFuzz) mutateBytes(b []byte) []byte {
	b = slices.Clone(b)
	for range 1 + fz.rng.IntN(4) {
		switch op := fz.rng.IntN(3); {
		case op == 0 && len(b) > 0:
			b[fz.rng.IntN(len(b))] ^= byte(1 << fz.rng.IntN(8))
		case op == 1 && len(b) > 0:
			i := fz.rng.IntN(len(b))
			b = append(b[:i], b[i+1:]...)
		default:
			i := fz.rng.IntN(len(b) + 1)
			b = slices.Insert(b, i, byte(fz.rng.IntN(256)))
		}
	}
	return b
}

// rawCodec sends and receives bytes as they are.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// pick returns one of vals.
func pick[T any](fz *criFuzz, vals ...T) T { return vals[fz.rng.IntN(len(vals))] }

// oddString is a name or path a request should not carry, or an odd but
// acceptable one.
func (fz *criFuzz) oddString() string {
	return pick(fz, "", " ", ".", "..", "../../../etc", "/abs/path", "a/b", "a\x00b", "a\nb", "ünïcödé",
		strings.Repeat("x", 254), strings.Repeat("y", 4096), "-", "*", "$(id)", "%s%n", "\t", "name:with:colons",
		"x"+strconv.Itoa(fz.rng.IntN(1000)))
}

func (fz *criFuzz) oddInt64() int64 {
	return pick[int64](fz, 0, -1, 1, 1<<31, -1<<31, 1<<62, -1<<63, 1<<63-1, 65535, 65536, 4096)
}

func (fz *criFuzz) oddID() string {
	return pick(fz, "", "0", randHex(32), fz.pod.id, fz.pod.id[:6], fz.ctr, fz.ctr[:6], "../"+fz.pod.id, fz.oddString())
}

func (fz *criFuzz) kinds() []rpcKind {
	e, ti := fz.e, fz.ti
	return []rpcKind{
		{
			name:   "RunPodSandbox",
			method: "/runtime.v1.RuntimeService/RunPodSandbox",
			valid: func(i int) proto.Message {
				return &runtimeapi.RunPodSandboxRequest{Config: e.podConfig(fmt.Sprintf("fz%d", i))}
			},
			mutate: fz.podMutations(),
			send: func(ctx context.Context, m proto.Message) (proto.Message, error) {
				return e.rt.RunPodSandbox(ctx, m.(*runtimeapi.RunPodSandboxRequest))
			},
			cleanup: func(t *testing.T, resp proto.Message) {
				id := resp.(*runtimeapi.RunPodSandboxResponse).PodSandboxId
				if id == fz.pod.id {
					return // the base pod's metadata, mutated back
				}
				e.noteIDs(id)
				e.stopPod(t, id)
				e.removePod(t, id)
			},
		},
		{
			name:   "CreateContainer",
			method: "/runtime.v1.RuntimeService/CreateContainer",
			valid: func(i int) proto.Message {
				return &runtimeapi.CreateContainerRequest{
					PodSandboxId:  fz.pod.id,
					Config:        containerConfig(fmt.Sprintf("fz%d", i), ti.ref("busybox"), ctrCommand("true")),
					SandboxConfig: fz.pod.cfg,
				}
			},
			mutate: fz.containerMutations(),
			send: func(ctx context.Context, m proto.Message) (proto.Message, error) {
				return e.rt.CreateContainer(ctx, m.(*runtimeapi.CreateContainerRequest))
			},
			cleanup: func(t *testing.T, resp proto.Message) {
				if id := resp.(*runtimeapi.CreateContainerResponse).ContainerId; id != fz.ctr {
					e.removeContainer(t, id)
				}
			},
		},
		{
			name:   "ExecSync",
			method: "/runtime.v1.RuntimeService/ExecSync",
			valid: func(int) proto.Message {
				return &runtimeapi.ExecSyncRequest{ContainerId: fz.ctr, Cmd: []string{"true"}, Timeout: 10}
			},
			mutate: []func(proto.Message, int){
				func(m proto.Message, _ int) { m.(*runtimeapi.ExecSyncRequest).ContainerId = fz.oddID() },
				func(m proto.Message, _ int) {
					m.(*runtimeapi.ExecSyncRequest).Cmd = pick(fz, nil, []string{""}, []string{"/nonexistent"},
						[]string{"echo", fz.oddString()}, []string{"sh", "-c", "exit 7"}, []string{fz.oddString()},
						[]string{"cat", "/proc/self/status"})
				},
				func(m proto.Message, _ int) {
					m.(*runtimeapi.ExecSyncRequest).Timeout = pick[int64](fz, -1, 0, -1<<63, 1<<62, 1<<63-1, 1)
				},
			},
			send: func(ctx context.Context, m proto.Message) (proto.Message, error) {
				return e.rt.ExecSync(ctx, m.(*runtimeapi.ExecSyncRequest))
			},
			cleanup: func(*testing.T, proto.Message) {},
		},
		{
			name:   "PullImage",
			method: "/runtime.v1.ImageService/PullImage",
			valid: func(int) proto.Message {
				return &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ti.ref("busybox")}}
			},
			mutate: []func(proto.Message, int){
				func(m proto.Message, _ int) {
					r := m.(*runtimeapi.PullImageRequest)
					r.Image = &runtimeapi.ImageSpec{}
					r.Image.Image = pick(fz, "", "UPPER/case", "a b", "busybox@sha256:12", ti.ref("missing"),
						ti.ref("busybox")+"x", "sha256:"+randHex(32), "sha256:"+randHex(3), "127.0.0.1:1/x/y:z",
						ti.reg.Addr()+"/../../etc:passwd", ti.reg.Addr()+"/test/busybox@sha256:"+randHex(32),
						ti.reg.Addr()+"/test/busybox:"+strings.Repeat("t", 200), "::", ":tag", "@", fz.oddString())
				},
				func(m proto.Message, _ int) { m.(*runtimeapi.PullImageRequest).Image = nil },
				func(m proto.Message, _ int) {
					m.(*runtimeapi.PullImageRequest).Auth = &runtimeapi.AuthConfig{
						Username: fz.oddString(), Password: fz.oddString(), Auth: pick(fz, "", "!!notbase64", "dXNlcjpwYXNz"),
						IdentityToken: fz.oddString(),
					}
				},
				func(m proto.Message, _ int) {
					m.(*runtimeapi.PullImageRequest).SandboxConfig = &runtimeapi.PodSandboxConfig{}
				},
			},
			send: func(ctx context.Context, m proto.Message) (proto.Message, error) {
				return e.img.PullImage(ctx, m.(*runtimeapi.PullImageRequest))
			},
			cleanup: func(*testing.T, proto.Message) {},
			extra:   []codes.Code{codes.Unavailable},
		},
	}
}

func (fz *criFuzz) podMutations() []func(proto.Message, int) {
	cfgOf := func(m proto.Message) *runtimeapi.PodSandboxConfig {
		r := m.(*runtimeapi.RunPodSandboxRequest)
		if r.Config == nil {
			r.Config = &runtimeapi.PodSandboxConfig{}
		}
		return r.Config
	}
	linux := func(m proto.Message) *runtimeapi.LinuxPodSandboxConfig {
		c := cfgOf(m)
		if c.Linux == nil {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{}
		}
		if c.Linux.SecurityContext == nil {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{}
		}
		if c.Linux.SecurityContext.NamespaceOptions == nil {
			c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{}
		}
		return c.Linux
	}
	meta := func(m proto.Message) *runtimeapi.PodSandboxMetadata {
		c := cfgOf(m)
		if c.Metadata == nil {
			c.Metadata = &runtimeapi.PodSandboxMetadata{}
		}
		return c.Metadata
	}
	mode := func() runtimeapi.NamespaceMode { return runtimeapi.NamespaceMode(fz.rng.IntN(6) - 1) }
	return []func(proto.Message, int){
		func(m proto.Message, _ int) { m.(*runtimeapi.RunPodSandboxRequest).Config = nil },
		func(m proto.Message, _ int) { cfgOf(m).Metadata = nil },
		func(m proto.Message, _ int) { meta(m).Name = fz.oddString() },
		func(m proto.Message, _ int) { meta(m).Namespace = fz.oddString() },
		func(m proto.Message, _ int) { meta(m).Uid = fz.oddString() },
		func(m proto.Message, _ int) { meta(m).Attempt = uint32(fz.oddInt64()) },
		func(m proto.Message, _ int) {
			m.(*runtimeapi.RunPodSandboxRequest).RuntimeHandler = pick(fz, "nope", "../runc", "RUNC", " ", fz.oddString())
		},
		func(m proto.Message, _ int) { cfgOf(m).Hostname = fz.oddString() },
		func(m proto.Message, _ int) {
			// Inside the env's log directory: the daemon makes it.
			cfgOf(m).LogDirectory = filepath.Join(fz.e.podLogDir, pick(fz, "", "x", "a b", "deep/er"))
		},
		func(m proto.Message, _ int) {
			cfgOf(m).DnsConfig = &runtimeapi.DNSConfig{
				Servers: []string{fz.oddString()}, Searches: []string{fz.oddString()}, Options: []string{fz.oddString()},
			}
		},
		func(m proto.Message, _ int) {
			cfgOf(m).PortMappings = append(cfgOf(m).PortMappings, &runtimeapi.PortMapping{
				Protocol:      runtimeapi.Protocol(fz.rng.IntN(5) - 1),
				ContainerPort: int32(fz.oddInt64()), HostPort: int32(fz.oddInt64()),
				HostIp: pick(fz, "", "127.0.0.1", "::1", "300.1.1.1", "not-an-ip"),
			})
		},
		func(m proto.Message, _ int) {
			l := linux(m)
			if l.Sysctls == nil {
				l.Sysctls = map[string]string{}
			}
			// Values that change nothing the host cares about, should runc
			// ever apply them outside the pod's namespaces.
			l.Sysctls[pick(fz, "", "kernel.panic", "net.ipv4.ip_unprivileged_port_start", "kernel.shm_rmid_forced",
				"fs.mqueue.msg_max", "../../x", "net.ipv4.nope", "kernel.hostname")] = pick(fz, "", "1", "x", "-1")
		},
		func(m proto.Message, _ int) {
			ns := linux(m).SecurityContext.NamespaceOptions
			ns.Network, ns.Pid, ns.Ipc = mode(), mode(), mode()
			ns.TargetId = fz.oddID()
		},
		func(m proto.Message, _ int) {
			sc := linux(m).SecurityContext
			sc.RunAsUser = &runtimeapi.Int64Value{Value: fz.oddInt64()}
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: fz.oddInt64()}
			sc.SupplementalGroups = []int64{fz.oddInt64()}
		},
		func(m proto.Message, _ int) {
			sc := linux(m).SecurityContext
			sc.Privileged = true
			sc.ReadonlyRootfs = fz.rng.IntN(2) == 0
		},
		func(m proto.Message, _ int) {
			linux(m).CgroupParent = pick(fz, "relative", "/", "/../../..", fz.e.cgroupRoot+"/../..", fz.e.cgroupRoot+"/x y", "")
		},
		func(m proto.Message, _ int) {
			linux(m).Resources = &runtimeapi.LinuxContainerResources{
				CpuShares: fz.oddInt64(), CpuQuota: fz.oddInt64(), CpuPeriod: fz.oddInt64(), MemoryLimitInBytes: fz.oddInt64(),
			}
		},
		func(m proto.Message, _ int) {
			c := cfgOf(m)
			c.Annotations = map[string]string{pick(fz, "podbay.io/network-order", "cri.sandbox.network.setup.v2", fz.oddString()): fz.oddString()}
			c.Labels = map[string]string{fz.oddString(): fz.oddString()}
		},
	}
}

func (fz *criFuzz) containerMutations() []func(proto.Message, int) {
	req := func(m proto.Message) *runtimeapi.CreateContainerRequest {
		return m.(*runtimeapi.CreateContainerRequest)
	}
	cfgOf := func(m proto.Message) *runtimeapi.ContainerConfig {
		r := req(m)
		if r.Config == nil {
			r.Config = &runtimeapi.ContainerConfig{}
		}
		if r.Config.Linux == nil {
			r.Config.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		if r.Config.Linux.SecurityContext == nil {
			r.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
		}
		return r.Config
	}
	return []func(proto.Message, int){
		func(m proto.Message, _ int) { req(m).Config = nil },
		func(m proto.Message, _ int) { req(m).PodSandboxId = fz.oddID() },
		func(m proto.Message, _ int) { req(m).SandboxConfig = nil },
		func(m proto.Message, _ int) {
			cfgOf(m).Metadata = pick(fz, nil, &runtimeapi.ContainerMetadata{Name: fz.oddString()})
		},
		func(m proto.Message, _ int) {
			cfgOf(m).Image = pick(fz, nil, &runtimeapi.ImageSpec{Image: pick(fz, "", "nope", "sha256:"+randHex(32), fz.ti.ref("missing"), fz.oddString())})
		},
		func(m proto.Message, _ int) { cfgOf(m).LogPath = fz.oddString() },
		func(m proto.Message, _ int) {
			cfgOf(m).Command = pick(fz, nil, []string{""}, []string{"/nonexistent"}, []string{fz.oddString()})
			cfgOf(m).Args = pick(fz, nil, []string{fz.oddString()})
		},
		func(m proto.Message, _ int) {
			cfgOf(m).Envs = append(cfgOf(m).Envs, &runtimeapi.KeyValue{Key: pick(fz, "", "A=B", "PATH", fz.oddString()), Value: []byte(fz.oddString())})
		},
		func(m proto.Message, _ int) {
			cfgOf(m).WorkingDir = fz.oddString()
		},
		func(m proto.Message, _ int) {
			cfgOf(m).Mounts = append(cfgOf(m).Mounts, &runtimeapi.Mount{
				ContainerPath: pick(fz, "/", "", "relative", "/data", "/proc", "/dev", "/../../x", "/etc/hosts"),
				HostPath:      pick(fz, "", "relative", "/nonexistent", "/", "/proc/self", "/dev/null", fz.e.podLogDir, "/etc/../etc"),
				Readonly:      true,
				Propagation:   runtimeapi.MountPropagation(fz.rng.IntN(5) - 1),
			})
		},
		func(m proto.Message, _ int) {
			cfgOf(m).Devices = append(cfgOf(m).Devices, &runtimeapi.Device{
				ContainerPath: pick(fz, "/dev/fz", "", "relative", "/", "/dev/null"),
				HostPath:      pick(fz, "/dev/null", "/dev/zero", "", "/nonexistent", "/etc/hostname", "/dev/pts", "relative"),
				Permissions:   pick(fz, "", "r", "rwm", "rwx", "mmm", fz.oddString()),
			})
		},
		func(m proto.Message, _ int) {
			sc := cfgOf(m).Linux.SecurityContext
			sc.Capabilities = &runtimeapi.Capability{
				AddCapabilities:  []string{pick(fz, "ALL", "NET_ADMIN", "cap_bogus", "", fz.oddString())},
				DropCapabilities: []string{pick(fz, "ALL", "CHOWN", "nope", "")},
			}
		},
		func(m proto.Message, _ int) {
			sc := cfgOf(m).Linux.SecurityContext
			sc.RunAsUser = pick(fz, nil, &runtimeapi.Int64Value{Value: fz.oddInt64()})
			sc.RunAsGroup = pick(fz, nil, &runtimeapi.Int64Value{Value: fz.oddInt64()})
			sc.RunAsUsername = pick(fz, "", "root", "nobody-here", "a:b", fz.oddString())
			sc.SupplementalGroups = []int64{fz.oddInt64()}
		},
		func(m proto.Message, _ int) {
			sc := cfgOf(m).Linux.SecurityContext
			sc.Seccomp = &runtimeapi.SecurityProfile{
				ProfileType:  runtimeapi.SecurityProfile_ProfileType(fz.rng.IntN(4) - 1),
				LocalhostRef: pick(fz, "", "relative.json", "/nonexistent.json", "/etc/hostname", "/proc/self/status"),
			}
			sc.Apparmor = &runtimeapi.SecurityProfile{
				ProfileType:  runtimeapi.SecurityProfile_ProfileType(fz.rng.IntN(4) - 1),
				LocalhostRef: fz.oddString(),
			}
		},
		func(m proto.Message, _ int) {
			sc := cfgOf(m).Linux.SecurityContext
			sc.NamespaceOptions = &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode(fz.rng.IntN(6) - 1), Pid: runtimeapi.NamespaceMode(fz.rng.IntN(6) - 1),
				Ipc: runtimeapi.NamespaceMode(fz.rng.IntN(6) - 1), TargetId: fz.oddID(),
			}
		},
		func(m proto.Message, _ int) {
			sc := cfgOf(m).Linux.SecurityContext
			sc.Privileged = true
			sc.MaskedPaths, sc.ReadonlyPaths = []string{fz.oddString()}, []string{fz.oddString()}
		},
		func(m proto.Message, _ int) {
			cfgOf(m).Linux.Resources = &runtimeapi.LinuxContainerResources{
				CpuShares: fz.oddInt64(), CpuQuota: fz.oddInt64(), CpuPeriod: fz.oddInt64(),
				MemoryLimitInBytes: fz.oddInt64(), OomScoreAdj: fz.oddInt64(),
				CpusetCpus: pick(fz, "", "0", "0-999", "x"), CpusetMems: pick(fz, "", "0", "9"),
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: fz.oddString(), Limit: uint64(fz.oddInt64())}},
				Unified:        map[string]string{fz.oddString(): fz.oddString()},
			}
		},
		func(m proto.Message, _ int) {
			c := cfgOf(m)
			c.Tty, c.Stdin, c.StdinOnce = fz.rng.IntN(2) == 0, fz.rng.IntN(2) == 0, fz.rng.IntN(2) == 0
			c.Annotations = map[string]string{fz.oddString(): fz.oddString()}
		},
	}
}
