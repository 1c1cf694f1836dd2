package server

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/nri"
)

// refusingPlugin adds an environment variable to every container and
// refuses containers named "refused"; it records the events it sees.
type refusingPlugin struct {
	mu     sync.Mutex
	events []string // guarded by mu
	synced chan struct{}
}

func (p *refusingPlugin) record(ev string) {
	p.mu.Lock()
	p.events = append(p.events, ev)
	p.mu.Unlock()
}

func (p *refusingPlugin) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

func (p *refusingPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if pod.Name == "refused" {
		return errors.New("pods named refused are not allowed")
	}
	return nil
}

func (p *refusingPlugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RemovePodSandbox " + pod.Name)
	return nil
}

func (p *refusingPlugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	close(p.synced)
	return nil, nil
}

func (p *refusingPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if c.Name == "refused" {
		return nil, nil, errors.New("containers named refused are not allowed")
	}
	p.record("CreateContainer " + c.Name)
	a := &api.ContainerAdjustment{}
	a.AddEnv("NRI_TEST", "yes")
	return a, nil, nil
}

func (p *refusingPlugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("RemoveContainer " + c.Name)
	return nil
}

func (p *refusingPlugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.record("StopContainer " + c.Name)
	return nil, nil
}

// withNRI starts NRI on e's server with p connected as an external plugin.
func (e *testEnv) withNRI(t *testing.T, p *refusingPlugin) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "nri.sock")
	e.srv.nri = nri.New(nri.Options{SocketPath: sock, PluginPath: dir, PluginConfigPath: dir, RequestTimeout: 5 * time.Second})
	if err := e.srv.StartNRI(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.StopNRI)
	s, err := stub.New(p, stub.WithSocketPath(sock), stub.WithPluginName("refuser"), stub.WithPluginIdx("10"), stub.WithOnClose(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Stop() })
	select {
	case <-p.synced:
	case <-time.After(10 * time.Second):
		t.Fatal("plugin not synchronized")
	}
	// NRI adds the plugin to its list after Synchronize, holding events
	// off (BlockPluginSync) until then: the next event reaches it.
}

func TestNRICreateContainer(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	p := &refusingPlugin{synced: make(chan struct{})}
	e.withNRI(t, p)

	_, err := e.create(pod, containerConfig("refused"))
	if err == nil || !strings.Contains(err.Error(), "containers named refused are not allowed") || !strings.Contains(err.Error(), "NRI") {
		t.Fatalf("create of a refused container: %v", err)
	}
	e.assertNoContainers(t)

	id := e.mustCreate(t, pod, containerConfig("app"))
	spec := readSpec(filepath.Join(e.cfg.State, "bundles", id))
	if spec == nil || !slices.Contains(spec.Process.Env, "NRI_TEST=yes") {
		t.Errorf("bundle spec env lacks the plugin's NRI_TEST: %v", spec)
	}
	if err := e.removeContainer(id); err != nil {
		t.Fatal(err)
	}
	want := []string{"RemoveContainer refused", "CreateContainer app", "StopContainer app", "RemoveContainer app"}
	if got := p.seen(); !slices.Equal(got, want) {
		t.Errorf("plugin events %q, want %q", got, want)
	}
}

// A plugin refusing a pod fails RunPodSandbox, which is undone: no pod,
// network attachment, runtime container or root filesystem is left, and
// the plugins are told the pod is gone.
func TestNRIRunPodSandboxRefused(t *testing.T) {
	e := newTestEnv(t, "")
	p := &refusingPlugin{synced: make(chan struct{})}
	e.withNRI(t, p)
	_, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: podConfig("refused")})
	if err == nil || !strings.Contains(err.Error(), "pods named refused are not allowed") {
		t.Fatalf("RunPodSandbox of a refused pod: %v", err)
	}
	list, _ := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
	if len(list.GetItems()) != 0 || e.net.holding() != 0 || e.rt.count() != 0 || e.img.count() != 0 {
		t.Errorf("left after the refusal: %d pods, %d attachments, %d runtime containers, %d root filesystems",
			len(list.GetItems()), e.net.holding(), e.rt.count(), e.img.count())
	}
	if got := p.seen(); !slices.Equal(got, []string{"RemovePodSandbox refused"}) {
		t.Errorf("plugin events %q", got)
	}
	// NRI still serves: a pod the plugin accepts runs.
	e.mustRun(t, podConfig("accepted"))
}

func TestNRIDomain(t *testing.T) {
	e := newTestEnv(t, "")
	cfg := podConfig("web")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 256}}
	pod := e.mustRun(t, cfg)
	e.podWithImage(t, "other")
	id := e.mustCreate(t, pod, containerConfig("app"))
	d := nriDomain{e.srv}

	pods, ctrs := d.Snapshot(context.Background())
	var web *api.PodSandbox
	for _, p := range pods {
		if p.Id == pod {
			web = p
		}
	}
	if len(pods) != 2 || web == nil || web.Name != "web" || web.GetLinux().GetPodResources().GetCpu().GetShares().GetValue() != 256 {
		t.Errorf("pods = %v", pods)
	}
	if len(ctrs) != 1 || ctrs[0].Id != id || ctrs[0].State != api.ContainerState_CONTAINER_CREATED || len(ctrs[0].Args) == 0 {
		t.Errorf("containers = %v", ctrs)
	}

	u := &api.ContainerUpdate{ContainerId: id}
	u.SetLinuxCPUSetCPUs("0")
	unknown := &api.ContainerUpdate{ContainerId: "nosuch", IgnoreFailure: true}
	unknown.SetLinuxCPUShares(2)
	failed, err := d.UpdateContainers(context.Background(), []*api.ContainerUpdate{u, unknown})
	if err != nil || len(failed) != 1 || failed[0].ContainerId != "nosuch" {
		t.Errorf("UpdateContainers = %v, %v; want only the unknown container failed, ignored", failed, err)
	}
	e.rt.mu.Lock()
	res := e.rt.updates[id]
	e.rt.mu.Unlock()
	if res == nil || res.CPU == nil || res.CPU.Cpus != "0" {
		t.Errorf("runtime got %+v", res)
	}
	unknown.IgnoreFailure = false
	if _, err := d.UpdateContainers(context.Background(), []*api.ContainerUpdate{unknown}); err == nil {
		t.Error("an update of an unknown container succeeded")
	}

	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	if _, ctrs := d.Snapshot(context.Background()); len(ctrs) != 0 {
		t.Errorf("an exited container is handed to plugins: %v", ctrs)
	}
}
