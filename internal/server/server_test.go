package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/failpoint"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/store"
)

type testEnv struct {
	srv *Server
	net *fakeNetwork
	ns  *fakeNetNS
	rt  *fakeRuntime
	// runtimes are the handlers a server is started with: "runc" is rt.
	runtimes map[string]runtime.Runtime
	img      *fakeImages
	cg       *fakeCgroups
	cfg      *config.Config
	db       *store.DB
	// images, if set, is the image store servers start with instead of img.
	images ImageStore
	// unavailable are the handlers servers start with as unavailable.
	unavailable map[string]error
}

// newTestEnv builds a server on fakes: none of it needs root.
func newTestEnv(t *testing.T, fps string) *testEnv {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "root")
	cfg.State = filepath.Join(dir, "state")
	cfg.NetNSDir = filepath.Join(dir, "netns")
	cfg.Runtimes = map[string]config.Runtime{"runc": {Path: "/bin/true"}}
	cfg.StatsCollectPeriod = 0 // no background sampling racing the tests' fakes
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(cfg.Root, "podbay.db"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := failpoint.Parse(fps)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{net: newFakeNetwork(), ns: newFakeNetNS(), rt: newFakeRuntime(), img: newFakeImages(filepath.Join(dir, "rootfs")),
		cg: newFakeCgroups(), cfg: cfg, db: db}
	e.runtimes = map[string]runtime.Runtime{"runc": e.rt}
	e.srv = e.newServer(t, set)
	t.Cleanup(func() {
		// Remove what the test left, through the server, so mounts go.
		list, _ := e.srv.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
		for _, p := range list.GetItems() {
			if _, err := e.srv.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				t.Errorf("cleanup: remove %s: %v", p.Id, err)
			}
		}
		e.srv.Shutdown(context.Background())
		db.Close()
	})
	return e
}

// newServer starts a server on the env's database and fakes and waits for
// its recovery.
func (e *testEnv) newServer(t *testing.T, fps *failpoint.Set) *Server {
	t.Helper()
	srv := e.startServer(t, fps)
	<-srv.Recovered()
	return srv
}

// startServer is newServer without the wait: recovery may still run.
func (e *testEnv) startServer(t *testing.T, fps *failpoint.Set) *Server {
	t.Helper()
	streams, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var images ImageStore = e.img
	if e.images != nil {
		images = e.images
	}
	srv, err := New(Options{
		Config: e.cfg, DB: e.db, Network: e.net, NetNS: e.ns,
		Runtimes:       e.runtimes,
		Unavailable:    e.unavailable,
		Cgroups:        e.cg,
		Failpoints:     fps,
		Images:         images,
		PauseBinary:    "/nonexistent/podbay-pause",
		StreamListener: streams,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Serves until Shutdown; some tests replace the server without one.
	go func() { _ = srv.ServeStreams() }()
	if err := srv.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return srv
}

// podConfig is a pod with its own network namespace.
func podConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: name + "-uid"},
		Hostname: name,
		Labels:   map[string]string{"app": name},
	}
}

// hostPodConfig is a pod on the host's network.
func hostPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}}
	return cfg
}

// call runs a handler through the interceptor, as gRPC would.
func call[Req, Resp any](s *Server, method string, fn func(context.Context, Req) (Resp, error), req Req) (Resp, error) {
	resp, err := s.unaryInterceptor(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/" + method}, func(ctx context.Context, r any) (any, error) {
		return fn(ctx, r.(Req))
	})
	var zero Resp
	if err != nil {
		return zero, err
	}
	return resp.(Resp), nil
}

func (e *testEnv) run(t *testing.T, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	t.Helper()
	resp, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

func (e *testEnv) assertNothingHeld(t *testing.T) {
	t.Helper()
	if n := e.net.holding(); n != 0 {
		t.Errorf("%d CNI attachments still held", n)
	}
	if n := e.ns.holding(); n != 0 {
		t.Errorf("%d network namespaces still pinned", n)
	}
	if n := e.rt.count(); n != 0 {
		t.Errorf("%d runtime containers left", n)
	}
	if n := e.img.count(); n != 0 {
		t.Errorf("%d root filesystems left", n)
	}
	if entries, _ := os.ReadDir(e.cfg.NetNSDir); len(entries) != 0 {
		t.Errorf("netns dir holds %d entries", len(entries))
	}
	if entries, _ := os.ReadDir(filepath.Join(e.cfg.Root, "sandboxes")); len(entries) != 0 {
		t.Errorf("%d sandbox dirs left", len(entries))
	}
	var n int
	if _, err := e.db.ForEach(sandboxBucket, func(store.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d sandbox records left", n)
	}
}

func TestRunPodSandboxValidation(t *testing.T) {
	e := newTestEnv(t, "")
	for _, tc := range []struct {
		name string
		req  *runtimeapi.RunPodSandboxRequest
		code codes.Code
	}{
		{"nil config", &runtimeapi.RunPodSandboxRequest{}, codes.InvalidArgument},
		{"no metadata", &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}}, codes.InvalidArgument},
		{"empty name", &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "a", Uid: "b"}}}, codes.InvalidArgument},
		{"empty uid", &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "b"}}}, codes.InvalidArgument},
		{"slash in name", &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "a/b", Namespace: "b", Uid: "c"}}}, codes.InvalidArgument},
		{"unknown handler", &runtimeapi.RunPodSandboxRequest{Config: podConfig("x"), RuntimeHandler: "kata"}, codes.InvalidArgument},
		{"bad port", &runtimeapi.RunPodSandboxRequest{Config: func() *runtimeapi.PodSandboxConfig {
			c := podConfig("y")
			c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 70000, HostPort: 80}}
			return c
		}()}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			e.assertNothingHeld(t)
		})
	}
}

func TestLifecycleAndIdempotence(t *testing.T) {
	e := newTestEnv(t, "")
	id, err := e.run(t, podConfig("web"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id[:12]})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("state %v", st.Status.State)
	}
	if st.Status.Network.Ip != "10.1.0.2" {
		t.Fatalf("ip %q", st.Status.Network.Ip)
	}
	if _, err := e.run(t, podConfig("web")); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same name again: %v, want AlreadyExists", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("stop #%d: %v", i, err)
		}
	}
	list, _ := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
		LabelSelector: map[string]string{"app": "web"},
	}})
	if len(list.Items) != 1 {
		t.Fatalf("list notready app=web: %d items", len(list.Items))
	}
	for i := 0; i < 2; i++ {
		if _, err := call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("remove #%d: %v", i, err)
		}
	}
	if _, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("status after remove: %v, want NotFound", err)
	}
	if _, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "nope"}); err != nil {
		t.Fatalf("stop unknown: %v", err)
	}
	e.assertNothingHeld(t)
}

// Every failing step undoes exactly what was done, and the name is free
// for the retry.
func TestRunPodSandboxRollback(t *testing.T) {
	steps := []string{"run.record", "run.create", "run.start", "run.ready", "run.netns", "run.cni"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			e := newTestEnv(t, step+"=1*error")
			_, err := e.run(t, podConfig("web"))
			if err == nil {
				t.Fatal("RunPodSandbox succeeded with a failing step")
			}
			e.assertNothingHeld(t)
			id, err := e.run(t, podConfig("web"))
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			e.assertNothingHeld(t)
		})
	}
	for _, verb := range []string{"create", "start"} {
		t.Run("runtime "+verb, func(t *testing.T) {
			e := newTestEnv(t, "")
			e.rt.failOn(verb, errors.New("runtime says no"))
			if _, err := e.run(t, podConfig("web")); err == nil {
				t.Fatal("RunPodSandbox succeeded")
			}
			e.assertNothingHeld(t)
		})
	}
	t.Run("cni add half way", func(t *testing.T) {
		e := newTestEnv(t, "")
		e.net.setupErr = errors.New("plugin failed")
		if _, err := e.run(t, podConfig("web")); err == nil {
			t.Fatal("RunPodSandbox succeeded")
		}
		e.assertNothingHeld(t)
	})
}

// A RunPodSandbox whose client gave up is finished and parked; the retry
// gets the same sandbox instead of "name reserved".
func TestRunPodSandboxParkedForRetry(t *testing.T) {
	e := newTestEnv(t, "")
	e.rt.startDelay = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := e.srv.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("slow")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first attempt: %v, want deadline exceeded", err)
	}
	// The retry arrives while the first is still at work: it waits for it.
	id1, err := e.run(t, podConfig("slow"))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	// And once the parked result was taken, the name is held again.
	if _, err := e.run(t, podConfig("slow")); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("third attempt: %v, want AlreadyExists", err)
	}
	list, _ := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
	if len(list.Items) != 1 || list.Items[0].Id != id1 {
		t.Fatalf("list = %v, want exactly %s", list.Items, id1)
	}
}

func TestRunPodSandboxParkedAfterCompletion(t *testing.T) {
	e := newTestEnv(t, "")
	e.rt.startDelay = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.srv.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("p")}); err == nil {
		t.Fatal("want deadline error")
	}
	// Wait until the background work published the sandbox.
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, _ := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
		if len(list.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sandbox never published")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Parking happens right after publication; give it the same chance.
	var id string
	var err error
	for time.Now().Before(deadline) {
		if id, err = e.run(t, podConfig("p")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || id == "" {
		t.Fatalf("retry after completion: %v", err)
	}
}

// A record left in state creating by a crash is undone at start-up, with
// every resource it names released.
func TestRecoverUndoesCreating(t *testing.T) {
	e := newTestEnv(t, "")
	id, err := e.run(t, podConfig("half"))
	if err != nil {
		t.Fatal(err)
	}
	// Make the record look like a crash hit just before "ready".
	var rec sandbox.Record
	if _, err := e.db.Get(sandboxBucket, id, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Phase = sandbox.PhaseCreating
	if err := e.db.Put(sandboxBucket, id, sandbox.RecordVersion, rec); err != nil {
		t.Fatal(err)
	}
	e.srv.Shutdown(context.Background())

	e.srv = e.newServer(t, nil)
	list, _ := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
	if len(list.Items) != 0 {
		t.Fatalf("half-made sandbox listed after restart: %v", list.Items)
	}
	e.assertNothingHeld(t)
}

// A ready pod survives a restart with the same ID, state and IP.
func TestRecoverKeepsReadyPods(t *testing.T) {
	e := newTestEnv(t, "")
	id, err := e.run(t, podConfig("keep"))
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	st, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("state after restart %v", st.Status.State)
	}
	if st.Status.Network.Ip != "10.1.0.2" {
		t.Fatalf("ip after restart %q", st.Status.Network.Ip)
	}
	// An orphan attachment (no record) is released at start-up.
	e.net.mu.Lock()
	e.net.added["0000000000000000000000000000000000000000000000000000000000000000"] = true
	e.net.mu.Unlock()
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	if n := e.net.holding(); n != 1 {
		t.Fatalf("after GC %d attachments held", n)
	}
}

// A restarted server serves before its pods are recovered: List and Status
// answer at once, while an RPC that changes a pod still being recovered
// waits for that pod's recovery rather than racing it.
func TestRecoveryRunsInBackground(t *testing.T) {
	e := newTestEnv(t, "")
	id, err := e.run(t, podConfig("slow"))
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Shutdown(context.Background())

	gate := make(chan struct{})
	e.rt.mu.Lock()
	e.rt.stateGate = gate
	e.rt.mu.Unlock()
	e.srv = e.startServer(t, nil)
	if _, err := call(e.srv, "Version", e.srv.Version, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("Version while recovering: %v", err)
	}
	list, err := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Id != id {
		t.Fatalf("ListPodSandbox while recovering = %v, %v; want the pod", list, err)
	}
	stopped := make(chan error, 1)
	go func() {
		_, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		stopped <- err
	}()
	select {
	case err := <-stopped:
		t.Fatalf("StopPodSandbox returned (%v) while the pod was still being recovered", err)
	case <-e.srv.Recovered():
		t.Fatal("recovery finished while the runtime could not answer")
	case <-time.After(200 * time.Millisecond):
	}
	e.rt.mu.Lock()
	e.rt.stateGate = nil
	e.rt.mu.Unlock()
	close(gate)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("StopPodSandbox after recovery: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StopPodSandbox did not return after the pod was recovered")
	}
	<-e.srv.Recovered()
}

// A port mapping with a protocol the CRI does not define is refused before
// anything is made (the CNI plugins refused it in ADD and again in the DEL
// of the undo, which left the pod for ever).
func TestRunPodSandboxRefusesUnknownProtocol(t *testing.T) {
	e := newTestEnv(t, "")
	cfg := podConfig("badproto")
	cfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol(-1), ContainerPort: 80, HostPort: 8080}}
	if _, err := e.run(t, cfg); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RunPodSandbox with protocol -1: %v, want InvalidArgument", err)
	}
	e.assertNothingHeld(t)
}

func TestStatusNetworkNotReady(t *testing.T) {
	e := newTestEnv(t, "")
	e.net.statusErr = errors.New("no network config found in /etc/cni/net.d")
	resp, err := call(e.srv, "Status", e.srv.Status, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady && (c.Status || c.Message == "") {
			t.Fatalf("network condition %+v, want not ready with a reason", c)
		}
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			t.Fatalf("runtime not ready")
		}
	}
}

// An offline node makes the default pause image from the built-in pause
// program, once; a non-default pause image that cannot be pulled fails the
// pod with the pull's error.
func TestPauseImageOffline(t *testing.T) {
	e := newTestEnv(t, "")
	for i := 0; i < 2; i++ {
		id, err := e.run(t, podConfig(fmt.Sprint("p", i)))
		if err != nil {
			t.Fatal(err)
		}
		call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	}
	if e.img.imports != 1 {
		t.Fatalf("built-in pause image made %d times, want 1", e.img.imports)
	}

	e2 := newTestEnv(t, "")
	e2.cfg.PauseImage = "example.com/pause:1"
	_, err := e2.run(t, podConfig("x"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("unpullable custom pause image: %v, want Unavailable", err)
	}
	e2.assertNothingHeld(t)
}
