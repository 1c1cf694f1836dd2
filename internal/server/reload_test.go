package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/runtime"
)

// closableRuntime is a fake runtime that knows whether it was closed, and
// fails a create after that.
type closableRuntime struct {
	*fakeRuntime
	name   string
	closed atomic.Bool
}

func (r *closableRuntime) Close() error {
	r.closed.Store(true)
	return nil
}

func (r *closableRuntime) Create(ctx context.Context, opts runtime.CreateOptions) (int, error) {
	if r.closed.Load() {
		return 0, fmt.Errorf("create on closed runtime %s", r.name)
	}
	return r.fakeRuntime.Create(ctx, opts)
}

// reloadEnv is a test env whose server can set up handlers on reload.
type reloadEnv struct {
	*testEnv
	mu      sync.Mutex
	made    map[string][]*closableRuntime // by handler, in order
	failNew map[string]error              // NewRuntime fails for these
	levels  []string
	// running is the configuration the daemon "started" with.
	running *config.Config
}

func newReloadEnv(t *testing.T) *reloadEnv {
	e := &reloadEnv{testEnv: newTestEnv(t, ""), made: map[string][]*closableRuntime{}, failNew: map[string]error{}}
	e.running = e.cfg.Clone()
	e.srv.reloadHooks = ReloadHooks{
		NewRuntime: func(cfg *config.Config, name string) (runtime.Runtime, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if err := e.failNew[name]; err != nil {
				return nil, err
			}
			rt := &closableRuntime{fakeRuntime: newFakeRuntime(), name: name}
			e.made[name] = append(e.made[name], rt)
			return rt, nil
		},
		SetLogLevel: func(level string) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.levels = append(e.levels, level)
		},
	}
	return e
}

// reload applies next (a copy of the running configuration, edited).
func (e *reloadEnv) reload(next *config.Config) ReloadResult {
	return e.srv.Reload(context.Background(), func() (*config.ReloadPlan, error) {
		return config.PlanReload(e.running, next)
	})
}

func (e *reloadEnv) last(name string) *closableRuntime {
	e.mu.Lock()
	defer e.mu.Unlock()
	rts := e.made[name]
	if len(rts) == 0 {
		return nil
	}
	return rts[len(rts)-1]
}

func (e *reloadEnv) handlers(t *testing.T) []string {
	t.Helper()
	resp, err := call(e.srv, "Status", e.srv.Status, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range resp.RuntimeHandlers {
		names = append(names, h.Name)
	}
	return names
}

func (e *reloadEnv) runOn(handler, name string) (string, error) {
	resp, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox,
		&runtimeapi.RunPodSandboxRequest{Config: podConfig(name), RuntimeHandler: handler})
	return resp.GetPodSandboxId(), err
}

func withHandler(cfg *config.Config, name string, rc config.Runtime) *config.Config {
	c := cfg.Clone()
	c.Runtimes[name] = rc
	return c
}

func without(cfg *config.Config, name string) *config.Config {
	c := cfg.Clone()
	delete(c.Runtimes, name)
	return c
}

func contains(list []string, sub string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, sub) })
}

func TestReloadAddsAndRemovesHandlers(t *testing.T) {
	e := newReloadEnv(t)
	next := withHandler(e.running, "extra", config.Runtime{Path: "/bin/true"})
	next.LogLevel = "debug"
	res := e.reload(next)
	if res.Error != "" || !contains(res.Applied, "runtimes.extra added") || !contains(res.Applied, `log_level "info" -> "debug"`) {
		t.Fatalf("reload result %+v", res)
	}
	if got := e.handlers(t); !slices.Contains(got, "extra") {
		t.Fatalf("Status lists %q, want extra", got)
	}
	if !slices.Equal(e.levels, []string{"debug"}) {
		t.Errorf("log levels applied %q", e.levels)
	}
	extra := e.last("extra")
	id, err := e.runOn("extra", "on-extra")
	if err != nil {
		t.Fatal(err)
	}
	if extra.called("create", id) != 1 {
		t.Fatal("the pod was not created on the added handler")
	}

	// Removed while a pod uses it: refused, the pod keeps working.
	res = e.reload(without(next, "extra"))
	if !contains(res.Refused, "runtimes.extra: not removed: pods use it") || contains(res.Applied, "runtimes.extra") {
		t.Fatalf("removal of a handler in use: %+v", res)
	}
	if extra.closed.Load() || !slices.Contains(e.handlers(t), "extra") {
		t.Fatal("a handler in use was closed or dropped")
	}
	if err := e.stopPod(id); err != nil {
		t.Fatal(err)
	}
	if extra.called("stop", id) == 0 && extra.called("delete", id) == 0 {
		t.Error("stop did not reach the pod's handler")
	}
	if err := e.removePod(id); err != nil {
		t.Fatal(err)
	}

	// Once no pod uses it, the same file removes it.
	res = e.reload(without(next, "extra"))
	if !contains(res.Applied, "runtimes.extra removed") || len(res.Refused) != 0 {
		t.Fatalf("removal of an unused handler: %+v", res)
	}
	if !extra.closed.Load() || slices.Contains(e.handlers(t), "extra") {
		t.Fatal("removed handler still open or listed")
	}
	if _, err := e.runOn("extra", "late"); err == nil || !strings.Contains(err.Error(), "unknown runtime handler") {
		t.Errorf("a pod on a removed handler: %v", err)
	}
	// Nothing changed: nothing is applied.
	if res := e.reload(without(next, "extra")); len(res.Applied) != 0 || len(res.Refused) != 0 {
		t.Errorf("reload without changes: %+v", res)
	}
}

func TestReloadChangedHandlers(t *testing.T) {
	e := newReloadEnv(t)
	base := withHandler(e.running, "oci", config.Runtime{Path: "/bin/true"})
	base = withHandler(base, "vm", config.Runtime{Type: config.TypeVM, Path: "/bin/true"})
	if res := e.reload(base); res.Error != "" {
		t.Fatal(res.Error)
	}
	oci, vm := e.last("oci"), e.last("vm")
	ociPod, err := e.runOn("oci", "p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.runOn("vm", "p2"); err != nil {
		t.Fatal(err)
	}

	// Annotations and network order: same instance, new settings.
	next := base.Clone()
	rc := next.Runtimes["oci"]
	rc.PodAnnotations = []string{"example.com/*"}
	next.Runtimes["oci"] = rc
	res := e.reload(next)
	if len(res.Refused) != 0 || !contains(res.Applied, "runtimes.oci.pod_annotations") || e.last("oci") != oci {
		t.Fatalf("annotation change: %+v", res)
	}

	// Root and type of a handler in use: refused.
	ociRoot := e.srv.current().Config().Runtimes["oci"].Root
	for _, mod := range []func(*config.Runtime){
		func(r *config.Runtime) { r.Root = "/elsewhere" },
		func(r *config.Runtime) { r.Type = config.TypeVM },
	} {
		bad := next.Clone()
		rc := bad.Runtimes["oci"]
		mod(&rc)
		bad.Runtimes["oci"] = rc
		res := e.reload(bad)
		if !contains(res.Refused, "runtimes.oci: root and type cannot change") || contains(res.Applied, "runtimes.oci") {
			t.Fatalf("root/type change in use: %+v", res)
		}
		if e.srv.current().Config().Runtimes["oci"].Root != ociRoot || e.srv.current().Runtimes()["oci"] != oci {
			t.Fatal("refused change took effect")
		}
	}

	// A vm handler in use keeps its shim settings.
	bad := next.Clone()
	rc = bad.Runtimes["vm"]
	rc.Timeout = config.Duration(1e9)
	bad.Runtimes["vm"] = rc
	if res := e.reload(bad); !contains(res.Refused, "runtimes.vm: a vm handler") || e.last("vm") != vm {
		t.Fatalf("vm change in use: %+v", res)
	}

	// The binary of an oci handler in use: a new instance for what comes
	// next; the old one stays open for the running pod's exit watcher.
	upgraded := next.Clone()
	rc = upgraded.Runtimes["oci"]
	rc.Path = "/bin/echo"
	upgraded.Runtimes["oci"] = rc
	res = e.reload(upgraded)
	newOCI := e.last("oci")
	if len(res.Refused) != 0 || newOCI == oci || oci.closed.Load() || !contains(res.Applied, "runtimes.oci.path") {
		t.Fatalf("path change in use: %+v", res)
	}
	id, err := e.runOn("oci", "p3")
	if err != nil {
		t.Fatal(err)
	}
	if newOCI.called("create", id) != 1 || oci.called("create", id) != 0 {
		t.Error("a new pod did not use the new instance")
	}
	if err := e.stopPod(ociPod); err != nil {
		t.Fatal(err)
	}
	// The retired instance is closed with the others at exit.
	if err := e.srv.CloseRuntimes(); err != nil {
		t.Fatal(err)
	}
	if !oci.closed.Load() || !newOCI.closed.Load() || !vm.closed.Load() {
		t.Error("CloseRuntimes left an instance open")
	}
}

func TestReloadRefusals(t *testing.T) {
	e := newReloadEnv(t)
	before := e.srv.current()

	// An invalid file changes nothing.
	bad := e.running.Clone()
	bad.LogLevel = "loud"
	bad.Runtimes["extra"] = config.Runtime{Path: "/bin/true"}
	res := e.reload(bad)
	if res.Error == "" || e.srv.current() != before || len(e.levels) != 0 {
		t.Fatalf("invalid configuration: %+v", res)
	}
	if last := e.srv.LastReload(); last == nil || last.Error == "" {
		t.Errorf("last reload %+v", last)
	}

	// A default handler that cannot be set up: the running default stays.
	e.failNew["broken"] = errors.New("no such binary")
	next := withHandler(e.running, "broken", config.Runtime{Path: "/nonexistent"})
	next.DefaultRuntime = "broken"
	res = e.reload(next)
	if !contains(res.Refused, `default_runtime: handler "broken" is not available: no such binary`) {
		t.Fatalf("unavailable default: %+v", res)
	}
	cur := e.srv.current()
	if cur.Config().DefaultRuntime != "runc" || cur.Unavailable()["broken"] == nil {
		t.Errorf("default %q, unavailable %v", cur.Config().DefaultRuntime, cur.Unavailable())
	}
	if !contains(res.Applied, "runtimes.broken added (unavailable: no such binary)") {
		t.Errorf("applied %q", res.Applied)
	}
	// Fixed: the next reload sets it up and makes it the default.
	delete(e.failNew, "broken")
	res = e.reload(next)
	if len(res.Refused) != 0 || e.srv.current().Config().DefaultRuntime != "broken" || !slices.Contains(e.handlers(t), "broken") {
		t.Fatalf("fixed default: %+v", res)
	}

	// What needs a restart is reported and left alone.
	moved := next.Clone()
	moved.Root = "/srv/elsewhere"
	moved.StreamPort = 10010
	res = e.reload(moved)
	if !contains(res.RestartNeeded, "root") || !contains(res.RestartNeeded, "stream_port") || e.srv.current().Config().Root != e.cfg.Root {
		t.Fatalf("restart keys: %+v", res)
	}

	// Without a network hook a CNI change is refused.
	netChange := next.Clone()
	netChange.Network.ConfDir = "/etc/other"
	res = e.reload(netChange)
	if !contains(res.Refused, "network.conf_dir") || e.srv.current().Config().Network.ConfDir != e.cfg.Network.ConfDir {
		t.Fatalf("network change without a hook: %+v", res)
	}
}

// A new network manager takes over new pods; Status shows the swap.
func TestReloadNetwork(t *testing.T) {
	e := newReloadEnv(t)
	second := newFakeNetwork()
	var made atomic.Int32
	e.srv.reloadHooks.NewNetwork = func(cfg *config.Config) (NetworkManager, error) {
		made.Add(1)
		if cfg.Network.ConfDir != "/etc/other" {
			t.Errorf("network set up for conf dir %q", cfg.Network.ConfDir)
		}
		return second, nil
	}
	next := e.running.Clone()
	next.Network.ConfDir = "/etc/other"
	next.Network.DefaultSubnet = "10.99.0.0/16"
	if res := e.reload(next); len(res.Refused) != 0 || made.Load() != 1 {
		t.Fatalf("network reload: %+v", res)
	}
	second.mu.Lock()
	calls := slices.Clone(second.calls)
	second.mu.Unlock()
	if !slices.Contains(calls, "cidr 10.99.0.0/16") {
		t.Errorf("default network not rewritten for the new subnet: %q", calls)
	}
	id, err := e.runOn("", "netpod")
	if err != nil {
		t.Fatal(err)
	}
	second.mu.Lock()
	added := second.added[id]
	second.mu.Unlock()
	if !added {
		t.Error("new pod not set up by the new network")
	}
}

// Pods made while handlers come and go never land on a closed runtime,
// and a handler a pod is being made on is not removed under it.
func TestReloadConcurrentPods(t *testing.T) {
	e := newReloadEnv(t)
	with := withHandler(e.running, "extra", config.Runtime{Path: "/bin/true"})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var created atomic.Int32
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id, err := e.runOn("extra", fmt.Sprintf("w%d-%d", w, i))
				if err != nil {
					if !strings.Contains(err.Error(), "unknown runtime handler") {
						t.Errorf("RunPodSandbox: %v", err)
					}
					continue
				}
				created.Add(1)
				if err := e.removePod(id); err != nil {
					t.Errorf("RemovePodSandbox: %v", err)
				}
			}
		}()
	}
	for i := range 40 {
		if i%2 == 0 {
			e.reload(with)
		} else {
			e.reload(e.running)
		}
	}
	close(stop)
	wg.Wait()
	if created.Load() == 0 {
		t.Log("no pod ran on the handler between reloads")
	}
}

// New pods use the pause image a reload names; pods already made keep
// theirs.
func TestReloadPauseImage(t *testing.T) {
	e := newReloadEnv(t)
	before, err := e.runOn("", "before")
	if err != nil {
		t.Fatal(err)
	}
	const ref = "example.com/pause:new"
	e.img.mu.Lock()
	e.img.registry[ref] = &image.Image{ID: strings.Repeat("ab", 32), RepoTags: []string{ref}}
	e.img.mu.Unlock()
	next := e.running.Clone()
	next.PauseImage = ref
	if res := e.reload(next); !contains(res.Applied, `pause_image "registry.k8s.io/pause:3.10" -> "example.com/pause:new"`) {
		t.Fatalf("reload %+v", res)
	}
	after, err := e.runOn("", "after")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.persisted(t, after).Image; got != strings.Repeat("ab", 32) {
		t.Errorf("new pod's pause image %q, want the reloaded one", got)
	}
	if got := e.persisted(t, before).Image; got == strings.Repeat("ab", 32) {
		t.Error("the earlier pod's record changed pause image")
	}
}
