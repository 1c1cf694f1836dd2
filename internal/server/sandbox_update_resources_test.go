package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/config"
)

// SetLimits records the limits per path and restores the previous ones.
func (f *fakeCgroups) SetLimits(path string, l cgroups.Limits) (func() error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.limitErr != nil {
		return nil, f.limitErr
	}
	if f.limits == nil {
		f.limits = map[string]cgroups.Limits{}
	}
	prev, had := f.limits[path]
	f.limits[path] = l
	return func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if had {
			f.limits[path] = prev
		} else {
			delete(f.limits, path)
		}
		return nil
	}, nil
}

func (f *fakeCgroups) limitsOf(path string) (cgroups.Limits, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.limits[path]
	return l, ok
}

// fakeSandboxUpdater is a vm handler's runtime: it takes the sandbox's
// annotations with an update.
type fakeSandboxUpdater struct {
	*fakeRuntime
	sandboxUpdates []map[string]string
}

func (f *fakeSandboxUpdater) UpdateSandbox(ctx context.Context, id string, r *specs.LinuxResources, ann map[string]string) error {
	if err := f.Update(ctx, id, r); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxUpdates = append(f.sandboxUpdates, maps.Clone(ann))
	return nil
}

const podCgroupParent = "/kubepods/burstable/podresize"

// resizablePod runs a pod with its own cgroup parent and resource totals.
func (e *testEnv) resizablePod(t *testing.T, name, handler, parent string) string {
	t.Helper()
	cfg := podConfig(name)
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent: parent,
		Resources:    &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20},
	}
	resp, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PodSandboxId
}

func (e *testEnv) resize(id string, res, over *runtimeapi.LinuxContainerResources) error {
	_, err := call(e.srv, "UpdatePodSandboxResources", e.srv.UpdatePodSandboxResources,
		&runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: id, Resources: res, Overhead: over})
	return err
}

// storedResources reads the resources of the pod's config as verbose
// PodSandboxStatus shows it.
func (e *testEnv) storedResources(t *testing.T, id string) (res, over *runtimeapi.LinuxContainerResources) {
	t.Helper()
	st, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := protojson.Unmarshal(info.Config, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.GetLinux().GetResources(), cfg.GetLinux().GetOverhead()
}

func wantResizeCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
}

func TestUpdatePodSandboxResourcesValidation(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.resizablePod(t, "web", "", podCgroupParent)
	shared := e.resizablePod(t, "shared", "", "")
	stopped := e.resizablePod(t, "stopped", "", podCgroupParent+"2")
	if err := e.stopPod(stopped); err != nil {
		t.Fatal(err)
	}
	ok := &runtimeapi.LinuxContainerResources{CpuQuota: 80000}
	for _, tc := range []struct {
		name      string
		id        string
		res, over *runtimeapi.LinuxContainerResources
		code      codes.Code
	}{
		{"unknown pod", "0123456789abcdef", ok, nil, codes.NotFound},
		{"cpu shares", pod, &runtimeapi.LinuxContainerResources{CpuShares: 1 << 20}, nil, codes.InvalidArgument},
		{"cpu period", pod, &runtimeapi.LinuxContainerResources{CpuPeriod: 10}, nil, codes.InvalidArgument},
		{"cpu quota", pod, &runtimeapi.LinuxContainerResources{CpuQuota: 10}, nil, codes.InvalidArgument},
		{"memory", pod, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20}, nil, codes.InvalidArgument},
		{"overhead memory", pod, ok, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -5}, codes.InvalidArgument},
		{"unified on v1", pod, &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1"}}, nil, codes.InvalidArgument},
		{"stopped pod", stopped, ok, nil, codes.FailedPrecondition},
		{"no pod cgroup", shared, ok, nil, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantResizeCode(t, e.resize(tc.id, tc.res, tc.over), tc.code)
			if _, ok := e.cg.limitsOf(podCgroupParent); ok {
				t.Error("a refused resize wrote the pod cgroup")
			}
			if e.rt.called("update", tc.id) != 0 {
				t.Error("a refused resize updated the sandbox container")
			}
		})
	}
	if res, _ := e.storedResources(t, pod); res.GetCpuQuota() != 50000 {
		t.Errorf("stored quota %d after refused resizes", res.GetCpuQuota())
	}
	// Nothing to change is no error.
	if err := e.resize(pod, nil, nil); err != nil {
		t.Errorf("empty resize: %v", err)
	}
}

func TestUpdatePodSandboxResourcesOCI(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.resizablePod(t, "web", "", podCgroupParent)
	res := &runtimeapi.LinuxContainerResources{
		CpuShares: 1024, CpuQuota: 150000, CpuPeriod: 100000, MemoryLimitInBytes: 256 << 20,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}},
	}
	over := &runtimeapi.LinuxContainerResources{CpuShares: 10, CpuQuota: 10000, MemoryLimitInBytes: 32 << 20}
	if err := e.resize(pod, res, over); err != nil {
		t.Fatal(err)
	}
	got, ok := e.cg.limitsOf(podCgroupParent)
	if !ok {
		t.Fatal("the pod cgroup was not written")
	}
	want := cgroups.Limits{CPUShares: 1034, CPUQuota: 160000, CPUPeriod: 100000, MemoryLimit: 288 << 20, Hugepages: map[string]uint64{"2MB": 4 << 20}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pod cgroup limits %+v, want %+v (totals plus overhead)", got, want)
	}
	u := e.rt.updates[pod]
	if u == nil || u.CPU == nil || *u.CPU.Quota != 150000 || *u.CPU.Shares != 1024 || *u.Memory.Limit != 256<<20 {
		t.Errorf("sandbox container update %+v, want the totals", u)
	}
	gotRes, gotOver := e.storedResources(t, pod)
	if gotRes.GetCpuQuota() != 150000 || gotOver.GetMemoryLimitInBytes() != 32<<20 {
		t.Errorf("stored resources %v, overhead %v", gotRes, gotOver)
	}
	// A restarted daemon reads them back.
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	if gotRes, _ := e.storedResources(t, pod); gotRes.GetMemoryLimitInBytes() != 256<<20 {
		t.Errorf("after restart: stored memory %d", gotRes.GetMemoryLimitInBytes())
	}
}

// A failing step undoes what the steps before it did, and the record
// keeps the old values.
func TestUpdatePodSandboxResourcesRollback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		quota int64 // 80000 grows, 20000 shrinks: the order of the steps
		fail  string
	}{
		{"grow, runtime fails after the cgroup", 80000, "runtime"},
		{"shrink, cgroup fails after the runtime", 20000, "cgroup"},
		{"grow, cgroup fails first", 80000, "cgroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			pod := e.resizablePod(t, "web", "", podCgroupParent)
			before := cgroups.Limits{CPUQuota: 50000}
			if _, err := e.cg.SetLimits(podCgroupParent, before); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("boom")
			if tc.fail == "runtime" {
				e.rt.failOn("update", boom)
			} else {
				e.cg.limitErr = boom
			}
			err := e.resize(pod, &runtimeapi.LinuxContainerResources{CpuQuota: tc.quota}, nil)
			if err == nil || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("resize with a failing %s: %v", tc.fail, err)
			}
			if got, _ := e.cg.limitsOf(podCgroupParent); got.CPUQuota != 50000 {
				t.Errorf("pod cgroup quota %d after a failed resize, want 50000", got.CPUQuota)
			}
			if u := e.rt.updates[pod]; u != nil && (u.CPU == nil || *u.CPU.Quota != 50000) {
				t.Errorf("sandbox container left at %+v, want its old quota back", u.CPU)
			}
			if res, _ := e.storedResources(t, pod); res.GetCpuQuota() != 50000 {
				t.Errorf("stored quota %d after a failed resize", res.GetCpuQuota())
			}
		})
	}
}

// A failure after both steps (persisting the record) undoes both.
func TestUpdatePodSandboxResourcesPersistFails(t *testing.T) {
	e := newTestEnv(t, "resize.persist=error")
	pod := e.resizablePod(t, "web", "", podCgroupParent)
	err := e.resize(pod, &runtimeapi.LinuxContainerResources{CpuQuota: 80000, MemoryLimitInBytes: 256 << 20}, nil)
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("resize with a failing persist: %v", err)
	}
	if _, ok := e.cg.limitsOf(podCgroupParent); ok {
		t.Error("the pod cgroup keeps the new limits after a failed persist")
	}
	if u := e.rt.updates[pod]; u == nil || *u.CPU.Quota != 50000 || *u.Memory.Limit != 128<<20 {
		t.Errorf("sandbox container left at %+v, want the old totals back", u)
	}
	if res, _ := e.storedResources(t, pod); res.GetCpuQuota() != 50000 {
		t.Errorf("stored quota %d after a failed persist", res.GetCpuQuota())
	}
}

func TestUpdatePodSandboxResourcesVM(t *testing.T) {
	e := newTestEnv(t, "")
	vm := &fakeSandboxUpdater{fakeRuntime: newFakeRuntime()}
	e.cfg.Runtimes["kata"] = config.Runtime{Type: config.TypeVM, Path: "/bin/true"}
	e.runtimes["kata"] = vm
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)

	// Under the shared default parent: only the shim learns the totals.
	pod := e.resizablePod(t, "web", "kata", "")
	if err := e.resize(pod, &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuQuota: 200000, CpuPeriod: 100000, MemoryLimitInBytes: 512 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	if len(vm.sandboxUpdates) != 1 {
		t.Fatalf("%d sandbox updates through the shim, want 1", len(vm.sandboxUpdates))
	}
	want := map[string]string{
		annotations.SandboxCPUShares: "2048", annotations.SandboxCPUQuota: "200000",
		annotations.SandboxCPUPeriod: "100000", annotations.SandboxMemory: fmt.Sprint(512 << 20),
	}
	if !maps.Equal(vm.sandboxUpdates[0], want) {
		t.Errorf("annotations %v, want %v", vm.sandboxUpdates[0], want)
	}
	if u := vm.updates[pod]; u == nil || *u.Memory.Limit != 512<<20 {
		t.Errorf("shim update %+v", u)
	}
	if len(e.cg.limits) != 0 {
		t.Errorf("a pod without a cgroup of its own wrote cgroups: %v", e.cg.limits)
	}

	// A failure in the shim leaves the stored totals.
	vm.failOn("update", errors.New("shim says no"))
	wantResizeCode(t, e.resize(pod, &runtimeapi.LinuxContainerResources{CpuQuota: 300000}, nil), codes.Unknown)
	if res, _ := e.storedResources(t, pod); res.GetCpuQuota() != 200000 {
		t.Errorf("stored quota %d after a failed shim update", res.GetCpuQuota())
	}
}

// NRI plugins see the update and may refuse it.
func TestUpdatePodSandboxResourcesNRI(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.resizablePod(t, "web", "", podCgroupParent)
	p := &refusingPlugin{synced: make(chan struct{})}
	e.withNRI(t, p)
	err := e.resize(pod, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 30}, nil)
	if err == nil || !strings.Contains(err.Error(), "no more than 512 MiB") {
		t.Fatalf("resize a plugin refuses: %v", err)
	}
	if _, ok := e.cg.limitsOf(podCgroupParent); ok {
		t.Error("a refused resize wrote the pod cgroup")
	}
	if err := e.resize(pod, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	seen := strings.Join(p.seen(), "; ")
	for _, ev := range []string{"UpdatePodSandbox web 268435456", "PostUpdatePodSandbox web"} {
		if !strings.Contains(seen, ev) {
			t.Errorf("plugin saw %q, want %q", seen, ev)
		}
	}
}

func (p *refusingPlugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, res *api.LinuxResources) error {
	limit := res.GetMemory().GetLimit().GetValue()
	if limit > 512<<20 {
		return errors.New("pods get no more than 512 MiB")
	}
	p.record(fmt.Sprintf("UpdatePodSandbox %s %d", pod.Name, limit))
	return nil
}

func (p *refusingPlugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("PostUpdatePodSandbox " + pod.Name)
	return nil
}
