package podsandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/runtime"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name        string
		handlerType string
		process     string
		needs       Needs
		want        Kind
	}{
		{"oci auto, pid CONTAINER", config.TypeOCI, config.SandboxProcessAuto, Needs{}, KindPinned},
		{"oci auto, pid POD", config.TypeOCI, config.SandboxProcessAuto, Needs{SharedPID: true}, KindPause},
		{"oci auto, hostUsers false", config.TypeOCI, config.SandboxProcessAuto, Needs{UserNamespace: true}, KindPause},
		{"oci always", config.TypeOCI, config.SandboxProcessAlways, Needs{}, KindPause},
		{"vm auto", config.TypeVM, config.SandboxProcessAuto, Needs{}, KindShim},
		{"vm always", config.TypeVM, config.SandboxProcessAlways, Needs{SharedPID: true}, KindShim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Choose(tc.handlerType, tc.process, tc.needs); got != tc.want {
				t.Errorf("Choose = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		kind, handlerType string
		want              Kind
	}{
		{"pinned", config.TypeOCI, KindPinned},
		{"pause", config.TypeOCI, KindPause},
		{"", config.TypeOCI, KindPause}, // a record from before kinds
		{"", config.TypeVM, KindShim},
		{"bogus", config.TypeVM, KindShim},
	} {
		if got := KindOf(tc.kind, tc.handlerType); got != tc.want {
			t.Errorf("KindOf(%q, %q) = %s, want %s", tc.kind, tc.handlerType, got, tc.want)
		}
	}
	if tr := KindPinned.Traits(); !tr.NeverExits || !tr.QuickCreate || !tr.Handlerless || !tr.HostKernel || !tr.PodShm || tr.TeardownInOrder || tr.MonitorPerPod {
		t.Errorf("pinned traits = %+v", tr)
	}
}

func TestPinnedNamespaces(t *testing.T) {
	ipc, uts := PinnedNamespaces("/run/podbay/pinns", "abc", true, true)
	if ipc != "/run/podbay/pinns/abc/ipc" || uts != "/run/podbay/pinns/abc/uts" {
		t.Errorf("paths = %q, %q", ipc, uts)
	}
	ipc, uts = PinnedNamespaces("/r", "abc", false, true)
	if ipc != "" || uts != "/r/abc/uts" {
		t.Errorf("host IPC: paths = %q, %q", ipc, uts)
	}
}

func TestPinRequest(t *testing.T) {
	spec := &specs.Spec{
		Hostname:   "web",
		Domainname: "example",
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace, Path: "/var/run/netns/podbay-abc"},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
			},
			Sysctl: map[string]string{"kernel.shmmax": "1000", "net.ipv4.ip_forward": "1"},
		},
	}
	req, err := PinRequest(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := podns.Request{IPC: true, UTS: true, Hostname: "web", Domainname: "example",
		Sysctls: spec.Linux.Sysctl, NetNS: "/var/run/netns/podbay-abc"}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("PinRequest = %+v, want %+v", req, want)
	}

	// Host network: the host's UTS and network namespaces, no hostname.
	hostNet := &specs.Spec{Hostname: "node", Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace}}}}
	if req, err = PinRequest(hostNet); err != nil || !req.IPC || req.UTS || req.Hostname != "" || req.NetNS != "" {
		t.Errorf("host network: %+v, %v", req, err)
	}

	userNS := &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.UserNamespace}}}}
	if _, err := PinRequest(userNS); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("user namespace: err = %v, want FailedPrecondition", err)
	}
}

// fakePins is the pins of one pod in memory.
type fakePins struct {
	calls   []string
	exists  bool
	mounted bool
	req     podns.Request
	err     error
}

func (f *fakePins) Pin(dir string, req podns.Request) error {
	f.calls = append(f.calls, "pin "+dir)
	if f.err != nil {
		return f.err
	}
	f.req, f.exists, f.mounted = req, true, true
	return nil
}
func (f *fakePins) Unmount(dir string) error {
	f.calls = append(f.calls, "unmount "+dir)
	f.mounted = false
	return nil
}
func (f *fakePins) Remove(dir string) error {
	f.calls = append(f.calls, "remove "+dir)
	f.exists, f.mounted = false, false
	return nil
}
func (f *fakePins) State(string) (bool, bool, error) { return f.exists, f.mounted, nil }

func TestPinnedLifecycle(t *testing.T) {
	ctx := context.Background()
	bundle := t.TempDir()
	spec := &specs.Spec{Version: specs.Version, Hostname: "web", Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace, Path: "/n"}},
	}}
	writeSpec(t, bundle, spec)
	pins := &fakePins{}
	ctl := NewPinned("/pins", pins)

	if _, err := ctl.Status(ctx, "p1"); !errdefs.IsNotFound(err) {
		t.Errorf("Status before Create: %v, want NotFound", err)
	}
	pid, err := ctl.Create(ctx, runtime.CreateOptions{ID: "p1", BundleDir: bundle})
	if err != nil || pid != 0 {
		t.Fatalf("Create = %d, %v", pid, err)
	}
	if !pins.req.IPC || !pins.req.UTS || pins.req.Hostname != "web" || pins.req.NetNS != "/n" {
		t.Errorf("pinned %+v", pins.req)
	}
	if err := ctl.Start(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if st, err := ctl.Status(ctx, "p1"); err != nil || st.Status != runtime.StatusRunning {
		t.Errorf("Status after Start = %v, %v", st.Status, err)
	}
	if _, exited, _ := ctl.Exited("p1"); exited {
		t.Error("Exited while pinned")
	}
	wctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ctl.Wait(wctx, "p1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want the context's end", err)
	}
	undo, err := ctl.Update(ctx, UpdateRequest{ID: "p1"})
	if err != nil || undo(ctx) != nil {
		t.Errorf("Update: %v", err)
	}
	for range 2 { // idempotent
		if err := ctl.Stop(ctx, "p1"); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := ctl.Status(ctx, "p1"); st.Status != runtime.StatusStopped {
		t.Errorf("Status after Stop = %v", st.Status)
	}
	if _, exited, _ := ctl.Exited("p1"); !exited {
		t.Error("not Exited after Stop")
	}
	for range 2 {
		if err := ctl.Delete(ctx, "p1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctl.Status(ctx, "p1"); !errdefs.IsNotFound(err) {
		t.Errorf("Status after Delete: %v, want NotFound", err)
	}
	want := []string{"pin /pins/p1", "unmount /pins/p1", "unmount /pins/p1", "remove /pins/p1", "remove /pins/p1"}
	if !reflect.DeepEqual(pins.calls, want) {
		t.Errorf("calls = %q, want %q", pins.calls, want)
	}
}

func TestPinnedCreateSysctlRefused(t *testing.T) {
	bundle := t.TempDir()
	spec := &specs.Spec{Version: specs.Version, Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace}},
		Sysctl:     map[string]string{"kernel.shmmax": "x"},
	}}
	writeSpec(t, bundle, spec)
	pins := &fakePins{err: &podns.SysctlError{Name: "kernel.shmmax", Err: os.ErrInvalid}}
	_, err := NewPinned("/pins", pins).Create(context.Background(), runtime.CreateOptions{ID: "p", BundleDir: bundle})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create with a refused sysctl: %v, want InvalidArgument", err)
	}
}

func writeSpec(t *testing.T, bundle string, spec *specs.Spec) {
	t.Helper()
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}
