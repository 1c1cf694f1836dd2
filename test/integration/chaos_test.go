package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// chaosOptions size a chaos run. The defaults are the bounded run of
// `make test`; `make chaos` sets the PODBAY_CHAOS_* variables for the long
// one.
type chaosOptions struct {
	lifecycles  int           // pod + container lifecycles in all (PODBAY_CHAOS_LIFECYCLES)
	concurrency int           // clients at once (PODBAY_CHAOS_CONCURRENCY)
	killEvery   time.Duration // mean time between kills (PODBAY_CHAOS_KILL_EVERY)
	soak        int           // lifecycles of the kill-free soak phase that comes first (PODBAY_CHAOS_SOAK)
	seed        uint64        // PODBAY_CHAOS_SEED; random when unset
}

func chaosOptionsFromEnv(t *testing.T) chaosOptions {
	o := chaosOptions{lifecycles: 24, concurrency: 4, killEvery: 3 * time.Second, soak: 8, seed: rand.Uint64()}
	envInt := func(key string, dst *int) {
		if v := os.Getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a number", key, v)
			}
			*dst = n
		}
	}
	envInt("PODBAY_CHAOS_LIFECYCLES", &o.lifecycles)
	envInt("PODBAY_CHAOS_CONCURRENCY", &o.concurrency)
	envInt("PODBAY_CHAOS_SOAK", &o.soak)
	if v := os.Getenv("PODBAY_CHAOS_KILL_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("PODBAY_CHAOS_KILL_EVERY=%q: want a duration", v)
		}
		o.killEvery = d
	}
	if v := os.Getenv("PODBAY_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PODBAY_CHAOS_SEED=%q: want a number", v)
		}
		o.seed = s
	}
	o.concurrency = max(o.concurrency, 1)
	return o
}

// TestChaos runs pod + container lifecycles from several clients at once
// while podbayd is SIGKILLed at random moments and restarted, and while
// conmon, shim and pause processes are killed under it. Pods run on an
// "oci" and a "vm" handler, some with host ports. Afterwards every pod and
// container must be removable and the host must hold nothing of them.
//
// A kill-free soak phase comes first and bounds the daemon's growth in
// RSS, open files and goroutines over its lifecycles.
func TestChaos(t *testing.T) {
	o := chaosOptionsFromEnv(t)
	t.Logf("chaos: seed %d (PODBAY_CHAOS_SEED), %d lifecycles (%d soak), %d clients, a kill every ~%v",
		o.seed, o.lifecycles+o.soak, o.soak, o.concurrency, o.killEvery)
	other := map[string]string{"oci": "vm", "vm": "oci"}[suiteRuntimeType]
	e, ti := newContainerEnvWith(t, envOptions{
		extraRuntimes: map[string]handlerOptions{"other": {typ: other}},
	}, "busybox")

	ch := &chaos{e: e, image: ti.ref("busybox"), handlers: []string{"runc", "other"}}
	ch.dial(t)
	defer ch.conn.Close()

	// Soak: lifecycles with no kills; the daemon must give back what
	// they took.
	warmup := min(o.soak, 20)
	if o.soak > 0 {
		ch.run(t, 0, warmup, o.concurrency, o.seed) // caches, pools, the first pod's work
		before := ch.daemonUsage(t)
		ch.run(t, warmup, o.soak, o.concurrency, o.seed+1)
		ch.waitIdle(t)
		after := ch.daemonUsage(t)
		t.Logf("soak: %d lifecycles: %s → %s", o.soak, before, after)
		fmt.Printf("chaos soak: %d lifecycles: before %s, after %s\n", o.soak, before, after)
		if grew := after.rssKiB - before.rssKiB; grew > soakRSSGrowthKiB {
			t.Errorf("soak: RSS grew by %d KiB over %d lifecycles (bound %d KiB)", grew, o.soak, soakRSSGrowthKiB)
		}
		if grew := after.fds - before.fds; grew > soakFDGrowth {
			t.Errorf("soak: open fds grew by %d over %d lifecycles (bound %d)", grew, o.soak, soakFDGrowth)
		}
		if grew := after.goroutines - before.goroutines; grew > soakGoroutineGrowth {
			t.Errorf("soak: goroutines grew by %d over %d lifecycles (bound %d)", grew, o.soak, soakGoroutineGrowth)
		}
	}

	// Chaos: the same lifecycles while the killer works.
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch.run(t, warmup+o.soak, o.lifecycles, o.concurrency, o.seed+2)
	}()
	rng := rand.New(rand.NewPCG(o.seed, 3))
	ch.killUntil(t, done, rng, o.killEvery)

	// After the last restart: everything left can be removed, and then
	// nothing is left.
	if !e.running() {
		ch.restart(t)
	}
	ch.removeEverything(t)
	leaks := settle(30*time.Second, func() []leak { return e.findLeaks(nil) })
	for _, l := range leaks {
		t.Errorf("chaos leak: %s", l)
	}
	r := ch.report(len(leaks))
	t.Log(r)
	fmt.Println(r)
	for _, f := range ch.failures {
		t.Error(f)
	}
}

// Soak bounds: what a daemon that gives everything back may still grow by
// over the soak phase (allocator and runtime caches, pooled connections).
const (
	soakRSSGrowthKiB    = 64 << 10
	soakFDGrowth        = 16
	soakGoroutineGrowth = 20
)

// lifecycleDeadline bounds one lifecycle, restarts included: a lifecycle
// that cannot finish its teardown within it is a stuck pod.
const lifecycleDeadline = 3 * time.Minute

type chaos struct {
	e        *env
	image    string
	handlers []string

	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient

	lifecycles   atomic.Int64 // finished, with their teardown
	degraded     atomic.Int64 // finished, but a step before teardown failed for good
	daemonKills  atomic.Int64
	processKills atomic.Int64

	mu        sync.Mutex
	restarts  []time.Duration // kill to serving; guarded by mu
	failures  []string        // guarded by mu
	stepFails map[string]int  // errors that were retried, by step and code; guarded by mu
}

// dial opens the clients' own connection, which outlives restarts (the
// env's is replaced at every start).
func (ch *chaos) dial(t *testing.T) {
	conn, err := grpc.NewClient("unix://"+ch.e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()), quickReconnect)
	if err != nil {
		t.Fatal(err)
	}
	ch.conn, ch.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	ch.stepFails = map[string]int{}
}

// run runs n lifecycles numbered from first, at most concurrency at once.
func (ch *chaos) run(t *testing.T, first, n, concurrency int, seed uint64) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ch.lifecycle(c, first+i, rng)
			}
		}()
	}
	wg.Wait()
}

// lifecycle is what a kubelet does for a short-lived pod: run the pod,
// create and start a container, then stop and remove both. A step that
// fails because the daemon is down is retried; a pod or container that
// could not be made is cleaned up as the kubelet would (list by label,
// stop, remove) and made again with the next attempt number.
func (ch *chaos) lifecycle(client, n int, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), lifecycleDeadline)
	defer cancel()
	name := fmt.Sprintf("chaos-%d", n)
	handler := ch.handlers[rng.IntN(len(ch.handlers))]
	var mods []podMod
	mods = append(mods, withLabel("chaos", name))
	switch rng.IntN(8) {
	case 0, 1:
		// One port per client: a client runs one lifecycle at a time.
		mods = append(mods, withPortMapping(int32(22000+client), 80))
	case 2:
		mods = append(mods, withHostNetwork())
	}
	// Half the pods share a PID namespace and keep a pause process (oci
	// handlers), which the kills may hit; the others have their
	// namespaces pinned and no sandbox process to kill.
	if rng.IntN(2) == 0 {
		mods = append(mods, withPause())
	}
	cfg := ch.e.podConfig(name, mods...)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		ch.fail("lifecycle %s: %v", name, err)
		return
	}
	defer os.RemoveAll(cfg.LogDirectory)

	degraded := false
	podID := ch.runPod(ctx, cfg, handler)
	if podID != "" {
		ctrID := ch.createContainer(ctx, podID, cfg, name)
		if ctrID != "" {
			if !ch.startContainer(ctx, ctrID) {
				degraded = true
			}
			ch.retry(ctx, "StopContainer", func(ctx context.Context) error {
				_, err := ch.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 2})
				return err
			})
			ch.retry(ctx, "RemoveContainer", func(ctx context.Context) error {
				_, err := ch.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctrID})
				return err
			})
		} else {
			degraded = true
		}
	} else {
		degraded = true
	}
	// Whatever this lifecycle made, by its label: the pods of failed
	// attempts too.
	ch.removePodsLabelled(ctx, name)
	if ctx.Err() != nil {
		ch.fail("lifecycle %s did not finish within %v", name, lifecycleDeadline)
		return
	}
	ch.lifecycles.Add(1)
	if degraded {
		ch.degraded.Add(1)
	}
}

// runPod runs the pod, retrying as the kubelet does; "" if it gave up.
func (ch *chaos) runPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	for attempt := uint32(0); attempt < 5 && ctx.Err() == nil; attempt++ {
		cfg.Metadata.Attempt = attempt
		var id string
		err := ch.retry(ctx, "RunPodSandbox", func(ctx context.Context) error {
			resp, err := ch.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
			if err == nil {
				id = resp.PodSandboxId
			}
			return err
		})
		if err == nil {
			ch.e.noteIDs(id)
			return id
		}
		// A pod of this attempt that is ready is the kubelet's to keep.
		pods := ch.podsLabelled(ctx, cfg.Labels["chaos"])
		for _, p := range pods {
			if p.State == runtimeapi.PodSandboxState_SANDBOX_READY && p.Metadata.GetAttempt() == attempt {
				return p.Id
			}
		}
		ch.removePodsLabelled(ctx, cfg.Labels["chaos"])
	}
	return ""
}

// createContainer creates the container, retrying as the kubelet does; ""
// if it gave up.
func (ch *chaos) createContainer(ctx context.Context, podID string, podCfg *runtimeapi.PodSandboxConfig, name string) string {
	for attempt := uint32(0); attempt < 5 && ctx.Err() == nil; attempt++ {
		cfg := containerConfig("box", ch.image,
			ctrShell("trap 'exit 0' TERM; while :; do sleep 0.2; done"),
			ctrLabel("chaos", name), ctrAttempt(attempt))
		var id string
		err := ch.retry(ctx, "CreateContainer", func(ctx context.Context) error {
			resp, err := ch.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
			if err == nil {
				id = resp.ContainerId
			}
			return err
		})
		if err == nil {
			return id
		}
		if status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition {
			return "" // the pod is gone or not ready: nothing to create in
		}
		for _, c := range ch.containersLabelled(ctx, name) {
			if c.Metadata.GetAttempt() == attempt && c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
				return c.Id
			}
			ch.retry(ctx, "RemoveContainer", func(ctx context.Context) error {
				_, err := ch.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id})
				return err
			})
		}
	}
	return ""
}

// startContainer starts the container; false if it could not be started
// (e.g. its pod's process was killed).
func (ch *chaos) startContainer(ctx context.Context, id string) bool {
	err := ch.retry(ctx, "StartContainer", func(ctx context.Context) error {
		_, err := ch.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		if err != nil && status.Code(err) != codes.Unavailable {
			// A start that went through before a crash: it is not
			// CREATED any more.
			if st, serr := ch.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); serr == nil &&
				st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
				return nil
			}
		}
		return err
	})
	return err == nil
}

// removePodsLabelled stops and removes every pod of one lifecycle.
func (ch *chaos) removePodsLabelled(ctx context.Context, name string) {
	for _, p := range ch.podsLabelled(ctx, name) {
		ch.removePod(ctx, p.Id)
	}
}

func (ch *chaos) removePod(ctx context.Context, id string) {
	ch.retry(ctx, "StopPodSandbox", func(ctx context.Context) error {
		_, err := ch.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
	ch.retry(ctx, "RemovePodSandbox", func(ctx context.Context) error {
		_, err := ch.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
}

func (ch *chaos) podsLabelled(ctx context.Context, name string) []*runtimeapi.PodSandbox {
	var pods []*runtimeapi.PodSandbox
	ch.retry(ctx, "ListPodSandbox", func(ctx context.Context) error {
		resp, err := ch.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
			Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"chaos": name}},
		})
		if err == nil {
			pods = resp.Items
		}
		return err
	})
	return pods
}

func (ch *chaos) containersLabelled(ctx context.Context, name string) []*runtimeapi.Container {
	var ctrs []*runtimeapi.Container
	ch.retry(ctx, "ListContainers", func(ctx context.Context) error {
		resp, err := ch.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{
			Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"chaos": name}},
		})
		if err == nil {
			ctrs = resp.Containers
		}
		return err
	})
	return ctrs
}

// retry calls rpc until it succeeds or fails for a reason that is not the
// daemon being down or busy (each call bounded as the kubelet's are). The
// errors it retried are counted by step and code.
func (ch *chaos) retry(ctx context.Context, step string, rpc func(context.Context) error) error {
	for {
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := rpc(callCtx)
		cancel()
		if err == nil {
			return nil
		}
		c := status.Code(err)
		ch.mu.Lock()
		ch.stepFails[step+" "+c.String()]++
		if c == codes.Unknown && !isTeardown(step) {
			// The code alone does not tell what went wrong; the
			// lifecycle retries it with a new attempt.
			ch.stepFails["(unknown error) "+step+": "+firstLine(status.Convert(err).Message())]++
		}
		ch.mu.Unlock()
		if ctx.Err() != nil {
			return err
		}
		switch {
		case c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled:
		case isTeardown(step):
			// Stop and Remove must always get through: anything else
			// is retried too, and reported if it lasts.
			ch.mu.Lock()
			ch.stepFails["(teardown error) "+step+": "+firstLine(err.Error())]++
			ch.mu.Unlock()
		default:
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func isTeardown(step string) bool {
	return strings.HasPrefix(step, "Stop") || strings.HasPrefix(step, "Remove")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	// IDs make every message distinct; the report groups by kind.
	return hexID.ReplaceAllString(s, "<id>")
}

func (ch *chaos) fail(format string, args ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.failures = append(ch.failures, fmt.Sprintf(format, args...))
}

// killUntil kills, until done is closed, every ~every: mostly the daemon
// (then restarts it), sometimes a conmon, shim or pause process of a pod.
func (ch *chaos) killUntil(t *testing.T, done <-chan struct{}, rng *rand.Rand, every time.Duration) {
	for {
		wait := every/2 + time.Duration(rng.Int64N(int64(every)))
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		if rng.IntN(4) > 0 {
			ch.e.kill9()
			ch.daemonKills.Add(1)
			ch.restart(t)
			continue
		}
		if ch.killMonitorOrPause(rng) {
			ch.processKills.Add(1)
		}
	}
}

// restart starts the daemon and records how long it took to serve.
func (ch *chaos) restart(t *testing.T) {
	start := time.Now()
	ch.e.start("")
	d := time.Since(start)
	ch.mu.Lock()
	ch.restarts = append(ch.restarts, d)
	ch.mu.Unlock()
}

// killMonitorOrPause SIGKILLs one conmon, shim or pause process of the
// env's pods, chosen at random; a pod without a sandbox process (pinned
// namespaces) offers only its containers' conmons.
func (ch *chaos) killMonitorOrPause(rng *rand.Rand) bool {
	var victims []int
	// With nothing kept, every process of the env's is a leak.
	for _, l := range ch.e.findLeaksOf(nil, "process") {
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(l.pid), "comm"))
		switch strings.TrimSpace(string(comm)) {
		case "conmon", "containerd-shim", "containerd-shim-runc-v2", "pause", "podbay-pause":
			victims = append(victims, l.pid)
		}
	}
	if len(victims) == 0 {
		return false
	}
	slices.Sort(victims)
	return syscall.Kill(victims[rng.IntN(len(victims))], syscall.SIGKILL) == nil
}

// removeEverything removes every container and pod the daemon lists; each
// must go within a bounded number of tries (a pod still being recovered
// in the background may ask for a retry).
func (ch *chaos) removeEverything(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctrs, err := ch.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatalf("ListContainers after the last restart: %v", err)
	}
	for _, c := range ctrs.Containers {
		if err := ch.removeWithin(ctx, func(ctx context.Context) error {
			_, err := ch.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id})
			return err
		}); err != nil {
			t.Errorf("container %s (%s) cannot be removed: %v", short(c.Id), c.Labels["chaos"], err)
		}
	}
	pods, err := ch.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox after the last restart: %v", err)
	}
	for _, p := range pods.Items {
		if err := ch.removeWithin(ctx, func(ctx context.Context) error {
			if _, err := ch.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				return err
			}
			_, err := ch.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
			return err
		}); err != nil {
			t.Errorf("pod %s (%s) cannot be removed: %v", short(p.Id), p.Labels["chaos"], err)
		}
	}
	if len(ctrs.Containers)+len(pods.Items) > 0 {
		t.Logf("removed what the clients left: %d containers, %d pods", len(ctrs.Containers), len(pods.Items))
	}
}

// removeWithin tries remove up to 10 times, a second apart.
func (ch *chaos) removeWithin(ctx context.Context, remove func(context.Context) error) error {
	var err error
	for range 10 {
		if err = remove(ctx); err == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return err
		}
		time.Sleep(time.Second)
	}
	return err
}

// waitIdle waits until the daemon lists no pods (the soak's lifecycles
// removed theirs), so that the usage after is measured at rest.
func (ch *chaos) waitIdle(t *testing.T) {
	if err := eventually(30*time.Second, func() error {
		resp, err := ch.rt.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		if len(resp.Items) > 0 {
			return fmt.Errorf("%d pods still listed", len(resp.Items))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// usage is what the soak measures of the daemon.
type usage struct {
	rssKiB, fds, goroutines int
}

func (u usage) String() string {
	return fmt.Sprintf("RSS %d KiB, %d fds, %d goroutines", u.rssKiB, u.fds, u.goroutines)
}

// daemonUsage reads the daemon's RSS and open fds from /proc and its
// goroutines from its metrics endpoint, after letting background work
// (exit watchers, log copies) settle.
func (ch *chaos) daemonUsage(t *testing.T) usage {
	time.Sleep(2 * time.Second)
	pid := ch.e.daemonPid()
	var u usage
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			u.rssKiB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	u.fds = len(fds)
	u.goroutines = ch.goroutines(t)
	return u
}

// goroutines reads go_goroutines from the daemon's metrics endpoint.
func (ch *chaos) goroutines(t *testing.T) int {
	resp, err := http.Get("http://" + ch.e.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("go_goroutines %q: %v", v, err)
			}
			return int(n)
		}
	}
	t.Fatal("the daemon's metrics have no go_goroutines")
	return 0
}

// report is the run's summary: rounds, lifecycles, restart times, what was
// retried, and the leak count.
func (ch *chaos) report(leaks int) string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: %d lifecycles done (%d degraded by a kill), %d daemon kills, %d conmon/shim/pause kills, %d leaks\n",
		ch.lifecycles.Load(), ch.degraded.Load(), ch.daemonKills.Load(), ch.processKills.Load(), leaks)
	if len(ch.restarts) > 0 {
		rs := slices.Clone(ch.restarts)
		slices.Sort(rs)
		fmt.Fprintf(&b, "chaos: restart to serving: p50 %v, max %v over %d restarts\n",
			rs[len(rs)/2].Round(time.Millisecond), rs[len(rs)-1].Round(time.Millisecond), len(rs))
	}
	for _, k := range sortedKeys(ch.stepFails) {
		fmt.Fprintf(&b, "chaos: retried %5d× %s\n", ch.stepFails[k], k)
	}
	for _, f := range ch.failures {
		fmt.Fprintf(&b, "chaos: FAILED %s\n", f)
	}
	return strings.TrimRight(b.String(), "\n")
}
