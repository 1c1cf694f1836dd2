package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/runtime"
)

// The pod RPCs on the fakes: every host-facing step (namespace, CNI,
// runtime, storage) is a fake that records its calls, so these run as any
// user.

func (e *testEnv) mustRun(t *testing.T, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	id, err := e.run(t, cfg)
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	return id
}

func (e *testEnv) stopPod(id string) error {
	_, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func (e *testEnv) removePod(id string) error {
	_, err := call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

func (e *testEnv) podStatus(t *testing.T, id string) *runtimeapi.PodSandboxStatus {
	t.Helper()
	resp, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	return resp.Status
}

// netnsPath is the sandbox key of pod id.
func (e *testEnv) netnsPath(id string) string { return netns.Path(e.cfg.NetNSDir, id) }

func wantStatus(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if status.Code(err) != want {
		t.Errorf("%s: %v (%v), want %v", what, status.Code(err), err, want)
	}
}

// A RunPodSandbox whose host-facing step fails releases what the steps
// before it took, checked on the fakes, and a retry then succeeds.
func TestRunPodSandboxUndoOnFakes(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		inject func(e *testEnv)
		// What the undo must have called.
		netnsRemoved, runtimeDeleted, networkDeleted bool
	}{
		// An oci handler makes the root filesystem beside CNI ADD, after
		// the pin: all is undone.
		{"rootfs create", func(e *testEnv) { e.img.failOn("createrootfs", boom) }, true, true, true},
		{"netns pin", func(e *testEnv) { e.ns.failOn("pin", boom) }, true, false, false},
		{"cni add", func(e *testEnv) { e.net.setupErr = boom }, true, false, true},
		{"runtime create", func(e *testEnv) { e.rt.failOn("create", boom) }, true, true, true},
		{"runtime start", func(e *testEnv) { e.rt.failOn("start", boom) }, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			tc.inject(e)
			_, err := e.run(t, podConfig("web"))
			if err == nil {
				t.Fatal("RunPodSandbox succeeded with a failing step")
			}
			e.assertNothingHeld(t)
			e.net.mu.Lock()
			calls := strings.Join(e.net.calls, ",")
			e.net.mu.Unlock()
			if got := strings.Contains(calls, "del "); got != tc.networkDeleted {
				t.Errorf("CNI DEL called = %v, want %v (calls %s)", got, tc.networkDeleted, calls)
			}
			e.ns.mu.Lock()
			removed := 0
			var pinned string
			for _, c := range e.ns.calls {
				if strings.HasPrefix(c, "remove ") {
					removed++
				}
				if strings.HasPrefix(c, "pin ") {
					pinned = strings.TrimPrefix(c, "pin ")
				}
			}
			e.ns.mu.Unlock()
			if got := removed > 0; got != tc.netnsRemoved {
				t.Errorf("netns removed = %v, want %v", got, tc.netnsRemoved)
			}
			if tc.runtimeDeleted {
				id := strings.TrimPrefix(pinned, netns.Prefix)
				if e.rt.called("delete", id) == 0 {
					t.Errorf("runtime Delete of %s not called", id)
				}
			}

			e.img.failOn("createrootfs", nil)
			e.ns.failOn("pin", nil)
			e.net.setupErr = nil
			e.rt.failOn("create", nil)
			e.rt.failOn("start", nil)
			id := e.mustRun(t, podConfig("web"))
			if err := e.removePod(id); err != nil {
				t.Fatal(err)
			}
			e.assertNothingHeld(t)
		})
	}
}

// A failing undo step keeps the record, so that the undo is finished later
// rather than leaking what is left; the next start finishes it.
func TestRunPodSandboxFailedUndoIsFinishedAtRestart(t *testing.T) {
	e := newTestEnv(t, "")
	e.rt.failOn("start", errors.New("start fails"))
	e.rt.failOn("delete", errors.New("delete fails"))
	if _, err := e.run(t, podConfig("web")); err == nil {
		t.Fatal("RunPodSandbox succeeded")
	}
	// The runtime Delete failed: later steps of the undo are skipped, the
	// namespace stays pinned for the CNI DEL still owed.
	if e.ns.holding() != 1 {
		t.Fatalf("%d namespaces pinned after a failed undo, want 1 (kept for the retry)", e.ns.holding())
	}
	e.rt.failOn("start", nil)
	e.rt.failOn("delete", nil)
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	e.assertNothingHeld(t)
}

// A pod on the host's network touches no namespace and no CNI.
func TestRunPodSandboxHostNetwork(t *testing.T) {
	e := newTestEnv(t, "")
	id := e.mustRun(t, hostPodConfig("host"))
	st := e.podStatus(t, id)
	if st.Network.GetIp() != "" || st.Linux.Namespaces.Options.Network != runtimeapi.NamespaceMode_NODE {
		t.Errorf("host pod status network %v, namespaces %v", st.Network, st.Linux.Namespaces.Options)
	}
	if err := e.stopPod(id); err != nil {
		t.Fatal(err)
	}
	if err := e.removePod(id); err != nil {
		t.Fatal(err)
	}
	if len(e.ns.calls) != 0 || len(e.net.calls) != 0 {
		t.Errorf("host pod made netns calls %v and CNI calls %v", e.ns.calls, e.net.calls)
	}
	e.assertNothingHeld(t)
}

// Stop runs CNI DEL, unmounts the namespace but keeps its file, and stops
// the pause container; a second Stop does nothing more. Remove deletes the
// file.
func TestStopPodSandboxReleasesNetwork(t *testing.T) {
	e := newTestEnv(t, "")
	id := e.mustRun(t, podConfig("web"))
	key := e.netnsPath(id)
	if err := e.stopPod(id); err != nil {
		t.Fatal(err)
	}
	if e.ns.holding() != 0 || !e.ns.called("unmount "+filepath.Base(key)) {
		t.Errorf("namespace still pinned after Stop (calls %v)", e.ns.calls)
	}
	if _, err := os.Stat(key); err != nil {
		t.Errorf("namespace file gone after Stop: %v", err)
	}
	if e.net.holding() != 0 {
		t.Errorf("CNI attachment held after Stop")
	}
	if e.rt.called("stop", id) != 1 {
		t.Errorf("pause container stopped %d times, want 1", e.rt.called("stop", id))
	}
	st := e.podStatus(t, id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Network.GetIp() != "" {
		t.Errorf("after Stop: state %v, ip %q", st.State, st.Network.GetIp())
	}
	e.net.mu.Lock()
	nCalls := len(e.net.calls)
	e.net.mu.Unlock()
	if err := e.stopPod(id); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if len(e.net.calls) != nCalls || e.rt.called("stop", id) != 1 {
		t.Errorf("second Stop did work again: CNI calls %v, runtime stops %d", e.net.calls, e.rt.called("stop", id))
	}
	if err := e.removePod(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(key); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace file after Remove: %v", err)
	}
	e.assertNothingHeld(t)
}

// A Stop or Remove that fails half way resumes where it stopped when
// retried.
func TestStopAndRemovePodSandboxRetry(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		inject func(e *testEnv, on bool)
		rpc    func(e *testEnv, id string) error
	}{
		{"stop: unmount", func(e *testEnv, on bool) { e.ns.failOn("unmount", errOr(on, boom)) }, (*testEnv).stopPod},
		{"stop: runtime stop", func(e *testEnv, on bool) { e.rt.failOn("stop", errOr(on, boom)) }, (*testEnv).stopPod},
		{"remove: runtime delete", func(e *testEnv, on bool) { e.rt.failOn("delete", errOr(on, boom)) }, (*testEnv).removePod},
		{"remove: rootfs", func(e *testEnv, on bool) { e.img.failOn("removerootfs", errOr(on, boom)) }, (*testEnv).removePod},
		{"remove: netns", func(e *testEnv, on bool) { e.ns.failOn("remove", errOr(on, boom)) }, (*testEnv).removePod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			id := e.mustRun(t, podConfig("web"))
			tc.inject(e, true)
			if err := tc.rpc(e, id); err == nil {
				t.Fatal("succeeded with a failing step")
			}
			if st := e.podStatus(t, id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("pod is %v after a failed %s", st.State, tc.name)
			}
			tc.inject(e, false)
			if err := tc.rpc(e, id); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if err := e.removePod(id); err != nil {
				t.Fatal(err)
			}
			e.assertNothingHeld(t)
		})
	}
}

func errOr(on bool, err error) error {
	if on {
		return err
	}
	return nil
}

// Every RPC that names a pod answers NotFound for an unknown one and
// InvalidArgument for an empty ID, except Stop and Remove, for which an
// unknown pod is already stopped and removed (CRI spec).
func TestPodRPCsUnknownAndEmptyID(t *testing.T) {
	e := newTestEnv(t, "")
	e.mustRun(t, podConfig("other"))
	rpcs := map[string]func(id string) error{
		"PodSandboxStatus": func(id string) error {
			_, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			return err
		},
		"PodSandboxStats": func(id string) error {
			_, err := call(e.srv, "PodSandboxStats", e.srv.PodSandboxStats, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id})
			return err
		},
		"PortForward": func(id string) error {
			_, err := call(e.srv, "PortForward", e.srv.PortForward, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: []int32{80}})
			return err
		},
		"CreateContainer": func(id string) error {
			_, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: containerConfig("c")})
			return err
		},
		"StopPodSandbox":   e.stopPod,
		"RemovePodSandbox": e.removePod,
	}
	for name, rpc := range rpcs {
		t.Run(name, func(t *testing.T) {
			want := codes.NotFound
			if name == "StopPodSandbox" || name == "RemovePodSandbox" {
				want = codes.OK
			}
			wantStatus(t, "unknown pod", rpc("0123456789abcdef"), want)
			wantStatus(t, "empty pod ID", rpc(""), codes.InvalidArgument)
		})
	}
}

func TestPodSandboxStatus(t *testing.T) {
	e := newTestEnv(t, "")
	cfg := podConfig("web")
	cfg.Metadata.Attempt = 2
	cfg.Annotations = map[string]string{"a": "b"}
	id := e.mustRun(t, cfg)
	resp, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id[:8], Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Status
	if st.Id != id || st.Metadata.Name != "web" || st.Metadata.Attempt != 2 || st.Annotations["a"] != "b" ||
		st.RuntimeHandler != "runc" || st.CreatedAt == 0 || st.Network.Ip != "10.1.0.2" {
		t.Errorf("status %v", st)
	}
	var info sandboxInfo
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("verbose info: %v", err)
	}
	settings, _ := json.Marshal(info.NetworkSettings)
	if info.ID != id || info.Pid != 4242 || !strings.Contains(string(settings), e.netnsPath(id)) || len(info.RuntimeSpec) == 0 {
		t.Errorf("verbose info %+v, network settings %s", info, settings)
	}
}

func TestListPodSandbox(t *testing.T) {
	e := newTestEnv(t, "")
	web := e.mustRun(t, podConfig("web"))
	db := e.mustRun(t, podConfig("db"))
	if err := e.stopPod(db); err != nil {
		t.Fatal(err)
	}
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"all", nil, []string{web, db}},
		{"by id", &runtimeapi.PodSandboxFilter{Id: web}, []string{web}},
		{"by id prefix", &runtimeapi.PodSandboxFilter{Id: db[:10]}, []string{db}},
		{"unknown id", &runtimeapi.PodSandboxFilter{Id: "0123456789abcdef"}, nil},
		{"ready", &runtimeapi.PodSandboxFilter{State: ready}, []string{web}},
		{"label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "db"}}, []string{db}},
		{"label mismatch", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "x"}}, nil},
		{"ready and label", &runtimeapi.PodSandboxFilter{State: ready, LabelSelector: map[string]string{"app": "db"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range resp.Items {
				got = append(got, p.Id)
			}
			if !sameSet(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}

// A pod's statistics are its cgroup's, and its containers'; a pod that is
// not ready reports its attributes only.
func TestPodSandboxStats(t *testing.T) {
	e := newTestEnv(t, "")
	podID, cid := e.runFakeContainer(t, nil)
	e.startFakeContainer(t, cid)
	podCgroup := path.Join(e.cfg.DefaultCgroupParent, "podbay-"+podID)
	e.cg.set(podCgroup, 1000, 1<<20)
	e.cg.set(e.cfg.DefaultCgroupParent+"/podbay-"+cid, 500, 1<<19)

	resp, err := call(e.srv, "PodSandboxStats", e.srv.PodSandboxStats, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	if st.Attributes.Id != podID || st.Linux.Cpu.UsageCoreNanoSeconds.Value != 1500 ||
		st.Linux.Memory.WorkingSetBytes.Value != 1<<20+1<<19 || st.Linux.Process.ProcessCount.Value != 2 {
		t.Errorf("pod stats %v", st)
	}
	if len(st.Linux.Containers) != 1 || st.Linux.Containers[0].Attributes.Id != cid || st.Linux.Containers[0].Cpu == nil {
		t.Errorf("container stats in pod stats %v", st.Linux.Containers)
	}

	other := e.mustRun(t, podConfig("other"))
	list, err := call(e.srv, "ListPodSandboxStats", e.srv.ListPodSandboxStats, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(list.Stats) != 2 {
		t.Fatalf("ListPodSandboxStats: %v, %v", list, err)
	}
	list, err = call(e.srv, "ListPodSandboxStats", e.srv.ListPodSandboxStats, &runtimeapi.ListPodSandboxStatsRequest{
		Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "other"}}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != other || list.Stats[0].Linux.Cpu != nil {
		t.Fatalf("ListPodSandboxStats app=other (no cgroup): %v, %v", list, err)
	}
	list, err = call(e.srv, "ListPodSandboxStats", e.srv.ListPodSandboxStats, &runtimeapi.ListPodSandboxStatsRequest{
		Filter: &runtimeapi.PodSandboxStatsFilter{Id: podID[:10]}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != podID {
		t.Fatalf("ListPodSandboxStats by ID prefix: %v, %v", list, err)
	}

	if err := e.stopPod(podID); err != nil {
		t.Fatal(err)
	}
	resp, err = call(e.srv, "PodSandboxStats", e.srv.PodSandboxStats, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil || resp.Stats.Linux.Cpu != nil {
		t.Errorf("stats of a stopped pod: %v, %v; want attributes only", resp, err)
	}
}

// TestPodSandboxStatsMemoryAvailable: a pod in its own cgroup (the
// kubelet's) reports that cgroup's limit less its working set as available
// memory, as the kubelet's Summary API wants it (node e2e: it was 0).
func TestPodSandboxStatsMemoryAvailable(t *testing.T) {
	e := newTestEnv(t, "")
	const podCgroup = "/kubepods/burstable/podabc"
	cfg := podConfig("limited")
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
	}
	cfg.Linux.CgroupParent = podCgroup
	id := e.mustRun(t, cfg)
	e.cg.set(podCgroup, 1000, 10<<20)
	e.cg.mu.Lock()
	e.cg.stats[podCgroup].Memory.Limit = 100 << 20
	e.cg.mu.Unlock()

	resp, err := call(e.srv, "PodSandboxStats", e.srv.PodSandboxStats, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Stats.GetLinux().GetMemory().GetAvailableBytes().GetValue(); got != 90<<20 {
		t.Errorf("available memory %d, want %d (limit 100 MiB, working set 10 MiB)", got, 90<<20)
	}
}

// A pod whose namespace is gone after a restart (a reboot) is not ready.
func TestRecoverPodWithoutNamespace(t *testing.T) {
	e := newTestEnv(t, "")
	id := e.mustRun(t, podConfig("web"))
	e.srv.Shutdown(context.Background())
	if err := e.ns.Unmount(e.netnsPath(id)); err != nil {
		t.Fatal(err)
	}
	e.srv = e.newServer(t, nil)
	if st := e.podStatus(t, id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod without its namespace is %v after restart", st.State)
	}
}

// At start-up, a podbay namespace that no record owns is removed unless a
// process is in it; files that are not podbay's are left alone.
func TestRecoverRemovesOrphanNamespaces(t *testing.T) {
	e := newTestEnv(t, "")
	orphan := e.netnsPath(strings.Repeat("a", 64))
	busy := e.netnsPath(strings.Repeat("b", 64))
	foreign := filepath.Join(e.cfg.NetNSDir, "cni-1234")
	for _, p := range []string{orphan, busy} {
		if err := e.ns.Pin(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(foreign, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	e.ns.mu.Lock()
	e.ns.inUse[busy] = true
	e.ns.mu.Unlock()
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	for p, want := range map[string]bool{orphan: false, busy: true, foreign: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
	// Leave the host (the temp dir) as the checks expect it.
	e.ns.mu.Lock()
	delete(e.ns.inUse, busy)
	e.ns.mu.Unlock()
	for _, p := range []string{busy, foreign} {
		if err := e.ns.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// A port-forward session connects to the pod's loopback through its
// namespace.
func TestPortForwardDialsInPodNamespace(t *testing.T) {
	e := newTestEnv(t, "")
	id := e.mustRun(t, podConfig("web"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("hello from the pod"))
	}()
	port := int32(l.Addr().(*net.TCPAddr).Port)

	client, server := net.Pipe()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { done <- streamRuntime{s: e.srv}.PortForward(ctx, id, port, server) }()
	got := make([]byte, len("hello from the pod"))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello from the pod" {
		t.Errorf("forwarded %q", got)
	}
	client.Close()
	if err := <-done; err != nil {
		t.Errorf("PortForward: %v", err)
	}
	if !e.ns.called("dial " + filepath.Base(e.netnsPath(id))) {
		t.Errorf("port forward did not dial in the pod's namespace: %v", e.ns.calls)
	}

	// A pod that is not ready has no port to forward to.
	if err := e.stopPod(id); err != nil {
		t.Fatal(err)
	}
	_, err = call(e.srv, "PortForward", e.srv.PortForward, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: []int32{port}})
	wantStatus(t, "PortForward to a stopped pod", err, codes.FailedPrecondition)
}

// The network order decides which undo steps a failure owes: with the
// network set up after the sandbox container starts, a failing CNI ADD
// also deletes the started container.
func TestRunPodSandboxNetworkOrder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"default", nil, "before"},
		{"podbay after", map[string]string{annotations.NetworkOrder: "after"}, "after"},
		{"podbay before", map[string]string{annotations.NetworkOrder: "before"}, "before"},
		{"iSulad v2 wins", map[string]string{annotations.NetworkSetupV2: "true", annotations.NetworkOrder: "after"}, "before"},
		{"bad value", map[string]string{annotations.NetworkOrder: "sideways"}, "before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			cfg := podConfig("web")
			cfg.Annotations = tc.annotations
			id := e.mustRun(t, cfg)
			resp, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			var info sandboxInfo
			if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.NetworkOrder != tc.want {
				t.Errorf("network order %q (%v), want %q", info.NetworkOrder, err, tc.want)
			}
			if err := e.removePod(id); err != nil {
				t.Fatal(err)
			}

			e.rt.mu.Lock()
			before := len(e.rt.calls)
			e.rt.mu.Unlock()
			e.net.setupErr = errors.New("plugin failed")
			if _, err := e.run(t, cfg); err == nil {
				t.Fatal("RunPodSandbox succeeded with a failing CNI ADD")
			}
			e.net.setupErr = nil
			e.assertNothingHeld(t)
			e.rt.mu.Lock()
			calls := strings.Join(e.rt.calls[before:], ",")
			e.rt.mu.Unlock()
			started := strings.Contains(calls, "start ")
			if want := tc.want == "after"; started != want || started && !strings.Contains(calls, "delete ") {
				t.Errorf("sandbox container started before CNI = %v, want %v; runtime calls %s", started, want, calls)
			}
		})
	}
}

// At start-up, a runtime container that no record owns (its record lost
// with a database set aside as corrupt) is killed and deleted, and its
// directory and bundle removed (in the root for one made before bundles
// moved, on the state dir for a new one); a container of the same runtime
// root whose bundle is not in podbay's directories belongs to another
// engine and is left alone.
func TestRecoverRemovesOrphanRuntimeContainers(t *testing.T) {
	e := newTestEnv(t, "")
	orphan, newOrphan, foreign := strings.Repeat("c", 64), strings.Repeat("e", 64), strings.Repeat("d", 64)
	orphanDir := filepath.Join(e.cfg.Root, "containers", orphan)
	newBundle := filepath.Join(e.cfg.State, "bundles", newOrphan)
	for id, bundle := range map[string]string{
		orphan:    filepath.Join(orphanDir, "bundle"),
		newOrphan: newBundle,
		foreign:   filepath.Join(t.TempDir(), "bundle"),
	} {
		if _, err := e.rt.Create(context.Background(), runtime.CreateOptions{ID: id, BundleDir: bundle}); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{filepath.Join(orphanDir, "bundle"), newBundle} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	for _, id := range []string{orphan, newOrphan} {
		if e.rt.called("delete", id) != 1 || e.rt.called("stop", id) != 1 {
			t.Errorf("orphan %s: stop %d, delete %d times, want once each", id[:4], e.rt.called("stop", id), e.rt.called("delete", id))
		}
	}
	for _, dir := range []string{orphanDir, newBundle} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("orphan's %s: %v, want it gone", dir, err)
		}
	}
	if n := e.rt.called("stop", foreign) + e.rt.called("delete", foreign); n != 0 {
		t.Errorf("another engine's container was stopped or deleted (%d calls)", n)
	}
	if err := e.rt.Delete(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
}
