package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The RPCs of a lifecycle, and the rows that time several together.
const (
	rpcRun          = "RunPodSandbox"
	rpcStop         = "StopPodSandbox"
	rpcRemove       = "RemovePodSandbox"
	rpcCreate       = "CreateContainer"
	rpcStart        = "StartContainer"
	rpcStopCtr      = "StopContainer"
	rpcRemoveCtr    = "RemoveContainer"
	rowReady        = "ready after start (log)"
	rowPod          = "pod (run+stop+remove)"
	rowContainer    = "container (4 RPCs)"
	rowPodContainer = "pod+container (7 RPCs)"
)

// rows lists a mode's report rows in lifecycle order; the summed rows add
// up the latencies of one lifecycle's RPCs.
func rows(mode string) []string {
	if mode == modeContainers {
		return []string{rpcRun, rpcCreate, rpcStart, rowReady, rpcStopCtr, rpcRemoveCtr, rpcStop, rpcRemove, rowContainer, rowPodContainer}
	}
	return []string{rpcRun, rpcStop, rpcRemove, rowPod}
}

// cleanupTimeout bounds each RPC of the cleanup after a failed mode.
const cleanupTimeout = 2 * time.Minute

type bench struct {
	client  runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	opts    options
	runID   string
	metrics *scraper // nil without -metrics
	out     io.Writer
}

// mode is one concurrency level's run: C workers share N lifecycles.
type mode struct {
	b           *bench
	concurrency int

	abortOnce sync.Once
	aborted   chan struct{} // closed on the first error

	mu         sync.Mutex
	err        error                                   // first error; guarded by mu
	live       map[string]*runtimeapi.PodSandboxConfig // created and not yet removed; guarded by mu
	gaveUp     []*runtimeapi.PodSandboxConfig          // Run hit the client deadline; guarded by mu
	containers map[string]string                       // container ID → pod name, created and not yet removed; guarded by mu
	exitCodes  map[int32]int                           // containers' exit codes after StopContainer; guarded by mu
	samples    map[string][]time.Duration              // successful RPC latencies by row; guarded by mu
	completed  int                                     // lifecycles done; guarded by mu
}

// runMode runs one mode, prints its report, and on any failure cleans up
// every pod the mode created before returning the error.
func (b *bench) runMode(ctx context.Context, concurrency int) error {
	m := &mode{
		b:           b,
		concurrency: concurrency,
		aborted:     make(chan struct{}),
		live:        map[string]*runtimeapi.PodSandboxConfig{},
		containers:  map[string]string{},
		exitCodes:   map[int32]int{},
		samples:     map[string][]time.Duration{},
	}
	var before metricSet
	var scrapeErr error
	if b.metrics != nil {
		before, scrapeErr = b.metrics.scrape(ctx)
	}

	start := time.Now()
	m.drive(ctx)
	elapsed := time.Since(start)

	var after metricSet
	if b.metrics != nil && scrapeErr == nil {
		after, scrapeErr = b.metrics.scrape(ctx)
	}
	if m.err == nil {
		// Remove succeeded for every container and pod; the daemon must
		// not list any.
		if left, err := b.listContainers(); err != nil {
			m.fail(fmt.Errorf("list containers after the mode: %w", err))
		} else if len(left) > 0 {
			m.fail(fmt.Errorf("daemon still lists %d of this run's containers after removing them all: %s", len(left), shortIDs(left)))
		}
		if left, err := b.listPods(); err != nil {
			m.fail(fmt.Errorf("list pods after the mode: %w", err))
		} else if len(left) > 0 {
			m.fail(fmt.Errorf("daemon still lists %d of this run's pods after removing them all: %s", len(left), shortIDs(left)))
		}
	}

	report{
		mode:        b.opts.mode,
		concurrency: concurrency,
		pods:        b.opts.pods,
		completed:   m.completed,
		elapsed:     elapsed,
		samples:     m.samples,
		exitCodes:   m.exitCodes,
		err:         m.err,
		before:      before,
		after:       after,
		scraped:     b.metrics != nil && scrapeErr == nil,
	}.print(b.out)

	if m.err != nil {
		if cerr := m.cleanup(); cerr != nil {
			return errors.Join(m.err, cerr)
		}
		return m.err
	}
	if scrapeErr != nil {
		return fmt.Errorf("scrape daemon metrics: %w", scrapeErr)
	}
	return nil
}

// drive hands the pod indices to the workers until all are done or the mode
// is aborted, and waits for the workers. An RPC already in flight when the
// mode aborts is left to finish, so that its pod is known to cleanup.
func (m *mode) drive(ctx context.Context) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range m.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				m.lifecycle(i)
			}
		}()
	}
	defer wg.Wait()
	defer close(jobs)
	for i := range m.b.opts.pods {
		select {
		case jobs <- i:
		case <-m.aborted:
			return
		case <-ctx.Done():
			m.fail(errors.New("interrupted"))
			return
		}
	}
}

// lifecycle runs lifecycle i of the mode: a pod, and in the container mode
// a container in it, from creation to removal. On an error it aborts the
// mode and leaves what it made to cleanup; it also stops early once another
// worker has aborted the mode.
func (m *mode) lifecycle(i int) {
	cfg := m.b.podConfig(m.concurrency, i)
	name := cfg.GetMetadata().GetName()

	id, total, ok := m.runPod(cfg)
	if !ok || m.isAborted() {
		return
	}
	if m.b.opts.mode == modeContainers {
		d, ok := m.containerLifecycle(id, cfg)
		if !ok || m.isAborted() {
			return
		}
		total += d
	}

	d, err := m.call(rpcStop, func(ctx context.Context) error {
		_, err := m.b.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
	if err != nil {
		m.fail(fmt.Errorf("stop pod %s (%.13s): %w", name, id, err))
		return
	}
	total += d
	if m.isAborted() {
		return
	}

	d, err = m.call(rpcRemove, func(ctx context.Context) error {
		_, err := m.b.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
	if err != nil {
		m.fail(fmt.Errorf("remove pod %s (%.13s): %w", name, id, err))
		return
	}
	total += d
	// Removing the pod's log directory is kubelet's part, untimed.
	if err := m.b.removeLogDir(name); err != nil {
		m.fail(err)
		return
	}
	row := rowPod
	if m.b.opts.mode == modeContainers {
		row = rowPodContainer
	}
	m.mu.Lock()
	delete(m.live, id)
	m.samples[row] = append(m.samples[row], total)
	m.completed++
	m.mu.Unlock()
}

// runPod runs the pod cfg and returns its ID and the RPC's latency; ok is
// false when it failed, and the mode is then aborted.
func (m *mode) runPod(cfg *runtimeapi.PodSandboxConfig) (id string, d time.Duration, ok bool) {
	if err := m.b.preparePod(cfg); err != nil {
		m.fail(fmt.Errorf("pod %s: %w", cfg.GetMetadata().GetName(), err))
		return "", 0, false
	}
	d, err := m.call(rpcRun, func(ctx context.Context) error {
		resp, err := m.b.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: m.b.opts.handler})
		id = resp.GetPodSandboxId()
		return err
	})
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			// The daemon finishes such a pod and parks it for a retry with
			// the same metadata; cleanup makes that retry.
			m.mu.Lock()
			m.gaveUp = append(m.gaveUp, cfg)
			m.mu.Unlock()
		}
		m.fail(fmt.Errorf("run pod %s: %w", cfg.GetMetadata().GetName(), err))
		return "", 0, false
	}
	m.mu.Lock()
	m.live[id] = cfg
	m.mu.Unlock()
	return id, d, true
}

// call times one RPC under the per-RPC deadline, records its latency if it
// succeeded, and returns it. The deadline does not derive from the mode's
// context: an interrupt stops new work, not an RPC whose result cleanup
// needs.
func (m *mode) call(rpc string, fn func(context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.b.opts.timeout)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	d := time.Since(start)
	if err == nil {
		m.mu.Lock()
		m.samples[rpc] = append(m.samples[rpc], d)
		m.mu.Unlock()
	}
	return d, err
}

func (m *mode) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	m.abortOnce.Do(func() { close(m.aborted) })
}

func (m *mode) isAborted() bool {
	select {
	case <-m.aborted:
		return true
	default:
		return false
	}
}

// cleanup stops and removes every container and pod the aborted mode may
// have left, containers first. Pods: those it knows, those whose Run it
// gave up on (retrying Run with the same metadata returns the pod the
// daemon finished anyway), and any other pod of this run the daemon lists.
// Containers: those it knows and any other container of this run the
// daemon lists, which covers a Create the client gave up on. It runs after
// the workers have returned.
func (m *mode) cleanup() error {
	var errs []error
	if err := m.cleanupContainers(); err != nil {
		errs = append(errs, err)
	}

	ids := map[string]bool{}
	for id := range m.live {
		ids[id] = true
	}
	for _, cfg := range m.gaveUp {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		resp, err := m.b.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: m.b.opts.handler})
		cancel()
		if err == nil {
			ids[resp.GetPodSandboxId()] = true
		}
	}
	listed, listErr := m.b.listPods()
	for _, id := range listed {
		ids[id] = true
	}
	if listErr != nil {
		errs = append(errs, fmt.Errorf("list this run's pods: %w", listErr))
	}
	if len(ids) == 0 && len(errs) == 0 {
		fmt.Fprintln(m.b.out, "cleanup: no pods left")
		return nil
	}
	sorted := slices.Sorted(maps.Keys(ids))
	fmt.Fprintf(m.b.out, "cleanup: stopping and removing %d pod(s)\n", len(sorted))
	for _, id := range sorted {
		if err := m.b.removePod(id); err != nil {
			errs = append(errs, err)
		}
	}
	if left, err := m.b.listPods(); err != nil {
		errs = append(errs, fmt.Errorf("list pods after cleanup: %w", err))
	} else if len(left) > 0 {
		errs = append(errs, fmt.Errorf("pods still listed after cleanup: %s", shortIDs(left)))
	}
	if err := m.b.removeLogDirs(); err != nil {
		errs = append(errs, err)
	}
	// RemovePodSandbox removes a pod's containers: none may be left.
	if left, err := m.b.listContainers(); err != nil {
		errs = append(errs, fmt.Errorf("list containers after cleanup: %w", err))
	} else if len(left) > 0 {
		errs = append(errs, fmt.Errorf("containers still listed after cleanup: %s", shortIDs(left)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleanup: %w", errors.Join(errs...))
	}
	fmt.Fprintln(m.b.out, "cleanup: done")
	return nil
}

// removePod stops and removes one pod; both are idempotent in the CRI.
func (b *bench) removePod(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := b.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("stop pod %.13s: %w", id, err)
	}
	if _, err := b.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("remove pod %.13s: %w", id, err)
	}
	return nil
}

// listPods returns the IDs of this run's pods that the daemon lists, in any
// state.
func (b *bench) listPods() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	resp, err := b.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelRun: b.runID}},
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range resp.GetItems() {
		ids = append(ids, p.GetId())
	}
	slices.Sort(ids)
	return ids, nil
}

// podConfig is pod i of the mode at concurrency c: its metadata is unique
// across modes and across runs against the same daemon.
func (b *bench) podConfig(c, i int) *runtimeapi.PodSandboxConfig {
	return b.namedPodConfig(fmt.Sprintf("bench-%s-c%d-%d", b.runID, c, i))
}

// namedPodConfig is the config of pod name (its UID too), the kubelet's
// with -kubelet.
func (b *bench) namedPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      name,
			Namespace: podNamespace,
			Uid:       name,
		},
		Hostname:     name,
		LogDirectory: b.logDir(name),
		Labels:       map[string]string{labelRun: b.runID},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: b.opts.cgroupParent},
	}
	if b.opts.kubelet {
		b.kubeletPod(cfg)
	}
	return cfg
}

// logDir is the log directory of pod name, or "" without -log-dir.
func (b *bench) logDir(name string) string {
	if b.opts.logDir == "" {
		return ""
	}
	if b.opts.kubelet {
		return filepath.Join(b.opts.logDir, kubeletLogDir(podNamespace, name, name))
	}
	return filepath.Join(b.opts.logDir, name)
}

// removeLogDir removes the log directory of pod name, as kubelet does once
// the pod is removed: the runtime removes a container's log file, not the
// pod's directory.
func (b *bench) removeLogDir(name string) error {
	if b.opts.logDir == "" {
		return nil
	}
	if err := os.RemoveAll(b.logDir(name)); err != nil {
		return fmt.Errorf("remove log directory of pod %s: %w", name, err)
	}
	return nil
}

// removeLogDirs removes the log directories of all this run's pods.
func (b *bench) removeLogDirs() error {
	if b.opts.logDir == "" {
		return nil
	}
	pattern := "bench-" + b.runID + "-*"
	if b.opts.kubelet {
		pattern = podNamespace + "_" + pattern
	}
	dirs, err := filepath.Glob(filepath.Join(b.opts.logDir, pattern))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove pod log directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

func shortIDs(ids []string) string {
	var b []byte
	for i, id := range ids {
		if i > 0 {
			b = append(b, ' ')
		}
		if len(id) > 13 {
			id = id[:13]
		}
		b = append(b, id...)
	}
	return string(b)
}
