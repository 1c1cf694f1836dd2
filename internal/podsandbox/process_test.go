package podsandbox

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/specgen"
)

// fakeRootfses records the root filesystems made and removed.
type fakeRootfses struct {
	calls []string
	err   error
}

func (f *fakeRootfses) CreateRootfs(_ context.Context, id, imageID string, _ image.RootfsOptions) (string, error) {
	f.calls = append(f.calls, "create "+id+" "+imageID)
	return "/rootfs/" + id, f.err
}

func (f *fakeRootfses) RemoveRootfs(_ context.Context, id string) error {
	f.calls = append(f.calls, "remove "+id)
	return f.err
}

func testHost(rootfs *fakeRootfses, img *image.Image, err error) Host {
	return Host{Rootfs: rootfs, PauseImage: func(context.Context) (*image.Image, error) { return img, err }}
}

// TestProcessMakesThePauseContainer: the process kinds plan the pause
// image and its command, make and remove its root filesystem, and put
// both in the spec.
func TestProcessMakesThePauseContainer(t *testing.T) {
	ctx := context.Background()
	rootfs := &fakeRootfses{}
	img := &image.Image{ID: "sha256:pause"}
	img.Config.Entrypoint, img.Config.Cmd = []string{"/pause"}, []string{"-v"}
	for _, ctl := range []Controller{NewPause(&fakeRuntime{}), NewShim(&fakeRuntime{})} {
		rootfs.calls = nil
		h := testHost(rootfs, img, nil)
		plan, err := ctl.Plan(ctx, h, PlanRequest{ID: "p", IPC: true, UTS: true})
		if err != nil {
			t.Fatal(err)
		}
		if want := (Plan{Image: "sha256:pause", Args: []string{"/pause", "-v"}}); !reflect.DeepEqual(plan, want) {
			t.Errorf("Plan = %+v, want %+v", plan, want)
		}
		path, err := ctl.MakeRootfs(ctx, h, "p", plan, image.RootfsOptions{})
		if err != nil || path != "/rootfs/p" {
			t.Errorf("MakeRootfs = %q, %v", path, err)
		}
		if err := ctl.RemoveRootfs(ctx, h, "p"); err != nil {
			t.Fatal(err)
		}
		if want := []string{"create p sha256:pause", "remove p"}; !reflect.DeepEqual(rootfs.calls, want) {
			t.Errorf("root filesystem calls = %q, want %q", rootfs.calls, want)
		}
		spec, err := ctl.Spec(specgen.Sandbox{ID: "p", HostNetwork: true}, plan, path)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Root == nil || spec.Root.Path != "/rootfs/p" || !reflect.DeepEqual(spec.Process.Args, plan.Args) {
			t.Errorf("spec root %+v, args %q", spec.Root, spec.Process.Args)
		}
		if got := ctl.Phases(); got.Create != "runtime_create" || got.Rootfs != "rootfs" || got.PauseImage != "pause_image" {
			t.Errorf("phases = %+v", got)
		}
	}
}

// TestProcessFailures: a pause image that cannot be had, or a root
// filesystem that cannot be made, fails the step with the cause.
func TestProcessFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	ctl := NewPause(&fakeRuntime{})
	if _, err := ctl.Plan(ctx, testHost(&fakeRootfses{}, nil, boom), PlanRequest{ID: "p"}); !errors.Is(err, boom) {
		t.Errorf("Plan = %v, want %v", err, boom)
	}
	h := testHost(&fakeRootfses{err: boom}, nil, nil)
	if _, err := ctl.MakeRootfs(ctx, h, "p", Plan{Image: "i"}, image.RootfsOptions{}); !errors.Is(err, boom) {
		t.Errorf("MakeRootfs = %v, want %v", err, boom)
	}
	if err := ctl.RemoveRootfs(ctx, h, "p"); !errors.Is(err, boom) {
		t.Errorf("RemoveRootfs = %v, want %v", err, boom)
	}
}

// TestPauseArgs: the image's entrypoint and command, else /pause.
func TestPauseArgs(t *testing.T) {
	img := &image.Image{}
	if got := PauseArgs(img); !reflect.DeepEqual(got, []string{"/pause"}) {
		t.Errorf("PauseArgs of an image without a command = %q", got)
	}
	img.Config.Cmd = []string{"/bin/pause"}
	if got := PauseArgs(img); !reflect.DeepEqual(got, []string{"/bin/pause"}) {
		t.Errorf("PauseArgs = %q", got)
	}
}

// TestPinnedMakesNoProcess: a pinned sandbox plans its pins' paths and no
// image, asks no pause image, makes and removes no root filesystem, and
// its spec has no root and no command.
func TestPinnedMakesNoProcess(t *testing.T) {
	ctx := context.Background()
	rootfs := &fakeRootfses{}
	h := Host{Rootfs: rootfs, PauseImage: func(context.Context) (*image.Image, error) {
		t.Error("a pinned sandbox asked for the pause image")
		return nil, errors.New("no")
	}}
	ctl := NewPinned("/pins", &fakePins{})
	plan, err := ctl.Plan(ctx, h, PlanRequest{ID: "p", IPC: true, UTS: false})
	if err != nil {
		t.Fatal(err)
	}
	ipc, _ := PinnedNamespaces("/pins", "p", true, false)
	if want := (Plan{IPC: ipc}); !reflect.DeepEqual(plan, want) {
		t.Errorf("Plan = %+v, want %+v", plan, want)
	}
	if path, err := ctl.MakeRootfs(ctx, h, "p", plan, image.RootfsOptions{}); path != "" || err != nil {
		t.Errorf("MakeRootfs = %q, %v", path, err)
	}
	if err := ctl.RemoveRootfs(ctx, h, "p"); err != nil || len(rootfs.calls) != 0 {
		t.Errorf("RemoveRootfs = %v; root filesystem calls %q", err, rootfs.calls)
	}
	spec, err := ctl.Spec(specgen.Sandbox{ID: "p", NetNSPath: "/netns/p"}, plan, "")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Root != nil || len(spec.Process.Args) != 0 {
		t.Errorf("pinned spec root %+v, args %q", spec.Root, spec.Process.Args)
	}
	hasIPC := false
	for _, ns := range spec.Linux.Namespaces {
		hasIPC = hasIPC || (ns.Type == specs.IPCNamespace && ns.Path == "")
	}
	if !hasIPC {
		t.Errorf("pinned spec namespaces %+v: no IPC namespace to pin", spec.Linux.Namespaces)
	}
	if got := ctl.Phases(); got != (Phases{Create: "pins", Stop: "unmount_pins", Delete: "remove_pins"}) {
		t.Errorf("phases = %+v", got)
	}
}

// TestRelease: a process kind's Release deletes the runtime state and the
// root filesystem, reports both phases and both failures; a pinned one's
// removes the pins only.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	rt, rootfs := &fakeRuntime{}, &fakeRootfses{}
	var (
		mu     sync.Mutex
		phases []string
	)
	observe := func(phase string, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		phases = append(phases, phase)
	}
	if err := NewPause(rt).Release(ctx, testHost(rootfs, nil, nil), "p", observe); err != nil {
		t.Fatal(err)
	}
	sort.Strings(phases)
	if !reflect.DeepEqual(rt.calls, []string{"delete p"}) || !reflect.DeepEqual(rootfs.calls, []string{"remove p"}) ||
		!reflect.DeepEqual(phases, []string{"rootfs", "runtime_delete"}) {
		t.Errorf("runtime calls %q, root filesystem calls %q, phases %q", rt.calls, rootfs.calls, phases)
	}

	boom, bang := errors.New("boom"), errors.New("bang")
	err := NewPause(&fakeRuntime{err: boom}).Release(ctx, testHost(&fakeRootfses{err: bang}, nil, nil), "p", observe)
	if !errors.Is(err, boom) || !errors.Is(err, bang) {
		t.Errorf("Release = %v, want both failures", err)
	}

	pins := &fakePins{exists: true, mounted: true}
	phases, rootfs.calls = nil, nil
	if err := NewPinned("/pins", pins).Release(ctx, testHost(rootfs, nil, nil), "p", observe); err != nil {
		t.Fatal(err)
	}
	if pins.exists || len(rootfs.calls) != 0 || !reflect.DeepEqual(phases, []string{"remove_pins"}) {
		t.Errorf("pinned Release: pins exist %v, root filesystem calls %q, phases %q", pins.exists, rootfs.calls, phases)
	}
}
