package podsandbox

import (
	"context"
	"errors"
	"reflect"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/runtime"
)

// fakeRuntime records the calls a controller makes; the methods it does
// not override panic through the nil embedded interface.
type fakeRuntime struct {
	runtime.Runtime
	calls []string
	err   error
}

func (f *fakeRuntime) record(call string) error {
	f.calls = append(f.calls, call)
	return f.err
}

func (f *fakeRuntime) Create(_ context.Context, opts runtime.CreateOptions) (int, error) {
	return 42, f.record("create " + opts.ID + " " + opts.BundleDir)
}
func (f *fakeRuntime) Start(_ context.Context, id string) error { return f.record("start " + id) }
func (f *fakeRuntime) Stop(_ context.Context, id string, timeout time.Duration, sig syscall.Signal) error {
	return f.record("stop " + id + " " + timeout.String() + " " + sig.String())
}
func (f *fakeRuntime) Delete(_ context.Context, id string) error { return f.record("delete " + id) }
func (f *fakeRuntime) State(_ context.Context, id string) (runtime.State, error) {
	return runtime.State{ID: id, Status: runtime.StatusRunning}, f.record("state " + id)
}
func (f *fakeRuntime) Exited(id string) (runtime.ExitStatus, bool, error) {
	return runtime.ExitStatus{Code: 3}, true, f.record("exited " + id)
}
func (f *fakeRuntime) Wait(_ context.Context, id string) (runtime.ExitStatus, error) {
	return runtime.ExitStatus{Code: 7}, f.record("wait " + id)
}
func (f *fakeRuntime) Update(_ context.Context, id string, r *specs.LinuxResources) error {
	return f.record("update " + id + " " + quota(r))
}

// fakeShimRuntime is a runtime with a sandbox update, as the shim
// runtime is.
type fakeShimRuntime struct {
	fakeRuntime
	ann []map[string]string
}

func (f *fakeShimRuntime) UpdateSandbox(_ context.Context, id string, r *specs.LinuxResources, ann map[string]string) error {
	f.ann = append(f.ann, ann)
	return f.record("update-sandbox " + id + " " + quota(r))
}

func quota(r *specs.LinuxResources) string {
	if r == nil || r.CPU == nil || r.CPU.Quota == nil {
		return "-"
	}
	return time.Duration(*r.CPU.Quota).String()
}

func limits(q int64) *specs.LinuxResources {
	return &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &q}}
}

func TestKindFor(t *testing.T) {
	for typ, want := range map[string]Kind{config.TypeOCI: KindPause, "": KindPause, config.TypeVM: KindShim} {
		if got := KindFor(typ); got != want {
			t.Errorf("KindFor(%q) = %s, want %s", typ, got, want)
		}
	}
}

// TestTraits pins what each kind declares: each field replaced a branch
// on the handler's type in the server.
func TestTraits(t *testing.T) {
	pause := Traits{HostKernel: true, PodShm: true}
	shim := Traits{CreateUsesNetwork: true, TeardownInOrder: true, SizedByUpdate: true, MonitorPerPod: true, BoundToInstance: true}
	if got := NewPause(&fakeRuntime{}).Traits(); got != pause {
		t.Errorf("pause traits %+v, want %+v", got, pause)
	}
	if got := NewShim(&fakeRuntime{}).Traits(); got != shim {
		t.Errorf("shim traits %+v, want %+v", got, shim)
	}
	if got := ForHandler(config.TypeVM, &fakeRuntime{}).Traits(); got != shim {
		t.Errorf("vm handler's traits %+v, want the shim's", got)
	}
	if m := pause.Monitor(); m != "conmon" {
		t.Errorf("pause monitor %q", m)
	}
	if m := shim.Monitor(); m != "shim" {
		t.Errorf("shim monitor %q", m)
	}
}

// TestLifecycle checks that both kinds drive their sandbox through the
// handler's runtime, the stop with SIGKILL and no grace period.
func TestLifecycle(t *testing.T) {
	for _, kind := range []Kind{KindPause, KindShim} {
		rt := &fakeRuntime{}
		ctl := For(kind, rt, "")
		ctx := context.Background()
		pid, err := ctl.Create(ctx, runtime.CreateOptions{ID: "p", BundleDir: "/b"})
		if err != nil || pid != 42 {
			t.Fatalf("%s: create = %d, %v", kind, pid, err)
		}
		if err := ctl.Start(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if st, err := ctl.Status(ctx, "p"); err != nil || st.Status != runtime.StatusRunning {
			t.Fatalf("%s: status = %+v, %v", kind, st, err)
		}
		if st, ok, err := ctl.Exited("p"); err != nil || !ok || st.Code != 3 {
			t.Fatalf("%s: exited = %+v %v %v", kind, st, ok, err)
		}
		if st, err := ctl.Wait(ctx, "p"); err != nil || st.Code != 7 {
			t.Fatalf("%s: wait = %+v, %v", kind, st, err)
		}
		if err := ctl.Stop(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if err := ctl.Delete(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		want := []string{"create p /b", "start p", "state p", "exited p", "wait p", "stop p 0s killed", "delete p"}
		if !reflect.DeepEqual(rt.calls, want) {
			t.Errorf("%s: calls %q, want %q", kind, rt.calls, want)
		}
	}
}

func TestErrorsPassThrough(t *testing.T) {
	boom := errors.New("boom")
	ctl := NewPause(&fakeRuntime{err: boom})
	if err := ctl.Start(context.Background(), "p"); !errors.Is(err, boom) {
		t.Errorf("start: %v", err)
	}
	if _, err := ctl.Update(context.Background(), UpdateRequest{ID: "p", Next: limits(1)}); !errors.Is(err, boom) {
		t.Errorf("update: %v", err)
	}
}

func TestPauseUpdate(t *testing.T) {
	rt := &fakeRuntime{}
	undo, err := NewPause(rt).Update(context.Background(), UpdateRequest{ID: "p", Next: limits(2), Prev: limits(1), Totals: Totals{CPUQuota: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := undo(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"update p 2ns", "update p 1ns"}; !reflect.DeepEqual(rt.calls, want) {
		t.Errorf("calls %q, want %q", rt.calls, want)
	}
}

// TestShimUpdate checks that the shim sandbox sends the pod's totals as
// the io.kubernetes.cri.sandbox-* annotations, and its undo the values
// the sandbox's config.json held.
func TestShimUpdate(t *testing.T) {
	rt := &fakeShimRuntime{}
	spec := &specs.Spec{Annotations: map[string]string{annotations.SandboxCPUQuota: "1", annotations.SandboxMemory: "100"}}
	undo, err := NewShim(rt).Update(context.Background(), UpdateRequest{
		ID: "p", Next: limits(2), Prev: limits(1), Spec: spec,
		Totals: Totals{CPUPeriod: 100000, CPUQuota: 2, CPUShares: 512, Memory: 200},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := undo(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"update-sandbox p 2ns", "update-sandbox p 1ns"}; !reflect.DeepEqual(rt.calls, want) {
		t.Errorf("calls %q, want %q", rt.calls, want)
	}
	next := map[string]string{annotations.SandboxCPUPeriod: "100000", annotations.SandboxCPUQuota: "2", annotations.SandboxCPUShares: "512", annotations.SandboxMemory: "200"}
	prev := map[string]string{annotations.SandboxCPUPeriod: "", annotations.SandboxCPUQuota: "1", annotations.SandboxCPUShares: "", annotations.SandboxMemory: "100"}
	if !reflect.DeepEqual(rt.ann, []map[string]string{next, prev}) {
		t.Errorf("annotations %v, want %v then %v", rt.ann, next, prev)
	}
}

// TestShimUpdateWithoutSandboxUpdate: a vm runtime without a sandbox
// update gets the plain update, as before the controller.
func TestShimUpdateWithoutSandboxUpdate(t *testing.T) {
	rt := &fakeRuntime{}
	if _, err := NewShim(rt).Update(context.Background(), UpdateRequest{ID: "p", Next: limits(2), Prev: limits(1)}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"update p 2ns"}; !reflect.DeepEqual(rt.calls, want) {
		t.Errorf("calls %q, want %q", rt.calls, want)
	}
}
