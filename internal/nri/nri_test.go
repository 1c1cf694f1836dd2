package nri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	validator "github.com/containerd/nri/plugins/default-validator"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// fakeDomain is the runtime side: fixed objects, recorded updates.
type fakeDomain struct {
	pods []*api.PodSandbox
	ctrs []*api.Container

	mu      sync.Mutex
	updates []*api.ContainerUpdate // guarded by mu
	got     chan struct{}
}

func (d *fakeDomain) Snapshot(context.Context) ([]*api.PodSandbox, []*api.Container) {
	return d.pods, d.ctrs
}

func (d *fakeDomain) UpdateContainers(_ context.Context, us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	d.mu.Lock()
	d.updates = append(d.updates, us...)
	d.mu.Unlock()
	d.got <- struct{}{}
	return nil, nil
}

func (d *fakeDomain) updated() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for _, u := range d.updates {
		ids = append(ids, u.GetContainerId()+":"+u.GetLinux().GetResources().GetCpu().GetCpus())
	}
	return ids
}

// testPlugin is an in-process NRI plugin on the stub library.
type testPlugin struct {
	stub   stub.Stub
	synced chan []string // IDs handed by Synchronize
	events chan string
}

func (p *testPlugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	var ids []string
	for _, x := range pods {
		ids = append(ids, x.Id)
	}
	for _, x := range ctrs {
		ids = append(ids, x.Id)
	}
	p.synced <- ids
	return nil, nil
}

func (p *testPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if pod.Name == "refuse" {
		return errors.New("pods named refuse are refused")
	}
	p.events <- "RunPodSandbox " + pod.Id
	return nil
}

func (p *testPlugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	a := &api.ContainerAdjustment{}
	a.AddEnv("FROM_PLUGIN", pod.Name+"/"+ctr.Name)
	a.AddMount(&api.Mount{Destination: "/plugin", Source: "/host/plugin", Type: "bind", Options: []string{"rbind", "ro"}})
	u := &api.ContainerUpdate{ContainerId: "c0"}
	u.SetLinuxCPUSetCPUs("1")
	return a, []*api.ContainerUpdate{u}, nil
}

func (p *testPlugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	u := &api.ContainerUpdate{ContainerId: ctr.Id}
	u.SetLinuxCPUSetCPUs("0-1")
	return []*api.ContainerUpdate{u}, nil
}

func (p *testPlugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.events <- "StopContainer " + ctr.Id
	return nil, nil
}

func startTestNRI(t *testing.T, domain Domain) (*NRI, *testPlugin) {
	t.Helper()
	dir := t.TempDir()
	n := New(Options{
		SocketPath: filepath.Join(dir, "nri.sock"), PluginPath: filepath.Join(dir, "plugins"),
		PluginConfigPath: filepath.Join(dir, "conf.d"), RequestTimeout: 5 * time.Second,
		RegistrationTimeout: 5 * time.Second, Version: "test",
	})
	if err := n.Start(domain); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	p := &testPlugin{synced: make(chan []string, 1), events: make(chan string, 10)}
	s, err := stub.New(p, stub.WithSocketPath(filepath.Join(dir, "nri.sock")), stub.WithPluginName("test"), stub.WithPluginIdx("10"),
		stub.WithOnClose(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	p.stub = s
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Stop() })
	return n, p
}

func TestNRIWithPlugin(t *testing.T) {
	ctx := context.Background()
	domain := &fakeDomain{
		pods: []*api.PodSandbox{{Id: "pod0", Name: "old"}},
		ctrs: []*api.Container{{Id: "c0", PodSandboxId: "pod0", Name: "old"}},
		got:  make(chan struct{}, 10),
	}
	n, p := startTestNRI(t, domain)

	select {
	case ids := <-p.synced:
		if !slices.Equal(ids, []string{"pod0", "c0"}) {
			t.Errorf("Synchronize handed %v, want pod0 and c0", ids)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin was not synchronized")
	}
	// Registration ends after Synchronize: wait until events reach it.
	pod := &api.PodSandbox{Id: "pod1", Name: "web"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := n.RunPodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-p.events:
			if ev != "RunPodSandbox pod1" {
				t.Fatalf("event %q", ev)
			}
		case <-time.After(100 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
			t.Fatal("RunPodSandbox did not reach the plugin")
		}
		break
	}

	// CreateContainer: the adjustment is in the spec, the update of
	// another container reaches the domain.
	spec := &rspec.Spec{Process: &rspec.Process{Env: []string{"PATH=/bin"}}, Linux: &rspec.Linux{}}
	ctr := &api.Container{Id: "c1", PodSandboxId: "pod1", Name: "app"}
	if err := n.CreateContainer(ctx, pod, ctr, spec); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Process.Env, "FROM_PLUGIN=web/app") {
		t.Errorf("env = %v", spec.Process.Env)
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Destination != "/plugin" {
		t.Errorf("mounts = %v", spec.Mounts)
	}
	<-domain.got
	if got := domain.updated(); !slices.Equal(got, []string{"c0:1"}) {
		t.Errorf("updates = %v, want c0's cpuset", got)
	}

	// UpdateContainer: the plugin's resources replace the request's.
	shares := uint64(2)
	res, others, err := n.UpdateContainer(ctx, pod, ctr, &rspec.LinuxResources{CPU: &rspec.LinuxCPU{Shares: &shares}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CPU == nil || res.CPU.Cpus != "0-1" || len(others) != 0 {
		t.Errorf("UpdateContainer = %+v, others %v", res.CPU, others)
	}

	// A plugin's unsolicited update goes to the domain.
	u := &api.ContainerUpdate{ContainerId: "c0"}
	u.SetLinuxCPUSetCPUs("3")
	if _, err := p.stub.UpdateContainers([]*api.ContainerUpdate{u}); err != nil {
		t.Fatal(err)
	}
	<-domain.got
	if got := domain.updated(); !slices.Equal(got, []string{"c0:1", "c0:3"}) {
		t.Errorf("updates = %v", got)
	}

	if _, err := n.StopContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	if ev := <-p.events; ev != "StopContainer c1" {
		t.Errorf("event %q", ev)
	}

	// A plugin refusing fails the event with its reason.
	err = n.RunPodSandbox(ctx, &api.PodSandbox{Id: "pod2", Name: "refuse"})
	if err == nil || !strings.Contains(err.Error(), "pods named refuse are refused") || !strings.Contains(err.Error(), "NRI RunPodSandbox") {
		t.Errorf("refused RunPodSandbox: %v", err)
	}
}

// A nil *NRI is NRI disabled: nothing happens, nothing fails.
func TestNRIDisabled(t *testing.T) {
	var n *NRI
	ctx := context.Background()
	spec := &rspec.Spec{Process: &rspec.Process{Env: []string{"A=1"}}}
	if err := n.Start(&fakeDomain{}); err != nil {
		t.Fatal(err)
	}
	if err := n.CreateContainer(ctx, nil, nil, spec); err != nil || len(spec.Process.Env) != 1 {
		t.Errorf("CreateContainer: %v, env %v", err, spec.Process.Env)
	}
	res := &rspec.LinuxResources{}
	if got, others, err := n.UpdateContainer(ctx, nil, nil, res); got != res || others != nil || err != nil {
		t.Errorf("UpdateContainer = %v, %v, %v", got, others, err)
	}
	if n.Enabled() {
		t.Error("a nil NRI is enabled")
	}
	n.Stop()
}

// With no plugin connected every event passes through unchanged.
func TestNRINoPlugin(t *testing.T) {
	dir := t.TempDir()
	n := New(Options{SocketPath: filepath.Join(dir, "nri.sock"), PluginPath: dir, PluginConfigPath: dir, Version: "test"})
	if err := n.Start(&fakeDomain{}); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx := context.Background()
	pod := &api.PodSandbox{Id: "p"}
	spec := &rspec.Spec{Process: &rspec.Process{Env: []string{"A=1"}}}
	if err := n.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := n.CreateContainer(ctx, pod, &api.Container{Id: "c"}, spec); err != nil || !slices.Equal(spec.Process.Env, []string{"A=1"}) {
		t.Errorf("CreateContainer: %v, env %v", err, spec.Process.Env)
	}
	shares := uint64(100)
	res, _, err := n.UpdateContainer(ctx, pod, &api.Container{Id: "c"}, &rspec.LinuxResources{CPU: &rspec.LinuxCPU{Shares: &shares}})
	if err != nil || res.CPU == nil || *res.CPU.Shares != 100 {
		t.Errorf("UpdateContainer = %+v, %v", res, err)
	}
}

// A socket another runtime serves on is not taken; a stale one is.
func TestNRISocketInUse(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "nri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	n := New(Options{SocketPath: sock, PluginPath: dir, PluginConfigPath: dir})
	if err := n.Start(&fakeDomain{}); err == nil || !strings.Contains(err.Error(), "served by another process") {
		n.Stop()
		t.Fatalf("Start on a live socket: %v", err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the other runtime's socket is gone: %v", err)
	}
	// Closed without removing the file: a stale socket, as a killed
	// daemon leaves it.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	n = New(Options{SocketPath: sock, PluginPath: dir, PluginConfigPath: dir})
	if err := n.Start(&fakeDomain{}); err != nil {
		t.Fatalf("Start on a stale socket: %v", err)
	}
	n.Stop()
}

// A validator's refusal is told apart from a plugin's own failure: NRI
// gives it only as ValidationResult's text.
func TestIsValidationRejection(t *testing.T) {
	rejected := (&api.ValidateContainerAdjustmentResponse{Reject: true, Reason: "no hooks"}).ValidationResult("00-default-validator")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rejected, true},
		{fmt.Errorf("wrapped: %w", rejected), true},
		{fmt.Errorf("x: %w", validator.ErrValidation), true},
		{errors.New("invalid device annotation"), false},
		{nil, false},
	} {
		if got := isValidationRejection(tc.err); got != tc.want {
			t.Errorf("isValidationRejection(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
