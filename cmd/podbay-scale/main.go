// podbay-scale measures a CRI runtime with many pods on the node: how fast
// N pods (each with one running container, unless -containers=false) are
// made and torn down at a concurrency, the latency of the list and status
// RPCs the kubelet polls (ListPodSandbox, ListContainers, PodSandboxStatus,
// ContainerStatus, ListContainerStats, ListPodSandboxStats) while they
// run, and the daemon's resident memory (given its PID). It speaks plain
// CRI, so the same run works against podbayd and containerd.
//
// -phase splits a run so that the daemon can be swapped between the
// measurements while the pods keep running: "up" makes the pods, "measure"
// times the RPCs against whatever pods carry the label, "down" removes
// them; "all" (the default) does the three in turn.
//
// Every pod and container carries the label podbay.io/scale=1; "down" (and
// a failed "up") remove whatever carries it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/procfs"
)

const (
	label     = "podbay.io/scale"
	namespace = "podbay-scale"
)

type options struct {
	socket      string
	n           int
	concurrency int
	containers  bool
	image       string
	samples     int
	pid         int
	logDir      string
	phase       string
	handler     string
	cgroup      string
	budget      time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.socket, "socket", "/run/podbay/podbay.sock", "CRI socket")
	flag.IntVar(&o.n, "n", 100, "pods")
	flag.IntVar(&o.concurrency, "concurrency", 10, "concurrent clients for up and down")
	flag.BoolVar(&o.containers, "containers", true, "one running container per pod")
	flag.StringVar(&o.image, "image", "", "container image (pulled once)")
	flag.IntVar(&o.samples, "samples", 200, "calls of each RPC in measure")
	flag.IntVar(&o.pid, "pid", 0, "daemon PID, for its RSS")
	flag.StringVar(&o.logDir, "log-dir", "", "parent of the pods' log directories")
	flag.StringVar(&o.phase, "phase", "all", "up, measure, down or all")
	flag.StringVar(&o.handler, "handler", "", "runtime handler")
	flag.StringVar(&o.cgroup, "cgroup-parent", "", "pods' cgroup parent")
	flag.DurationVar(&o.budget, "budget", 20*time.Second, "time limit of each RPC's calls in measure")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "podbay-scale:", err)
		os.Exit(1)
	}
}

type client struct {
	o  options
	rt runtimeapi.RuntimeServiceClient
	im runtimeapi.ImageServiceClient
}

func run(o options) error {
	conn, err := grpc.NewClient("unix://"+o.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := &client{o: o, rt: runtimeapi.NewRuntimeServiceClient(conn), im: runtimeapi.NewImageServiceClient(conn)}
	ctx := context.Background()
	switch o.phase {
	case "up":
		return c.up(ctx)
	case "measure":
		return c.measure(ctx)
	case "down":
		return c.down(ctx)
	case "all":
		c.rss("idle before up")
		if err := c.up(ctx); err != nil {
			return errors.Join(err, c.down(ctx))
		}
		err := c.measure(ctx)
		return errors.Join(err, c.down(ctx))
	}
	return fmt.Errorf("unknown -phase %q", o.phase)
}

func (c *client) rss(what string) {
	if c.o.pid == 0 {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.o.pid))
	if err != nil {
		fmt.Printf("rss %s: %v\n", what, err)
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "VmHWM:") || strings.HasPrefix(l, "Threads:") {
			fmt.Printf("%s %s\n", what, strings.Join(strings.Fields(l), " "))
		}
	}
}

// cpuTime is the daemon's user and system CPU time so far (0 without
// -pid): per call, it shows the daemon's own cost on a machine whose
// other load stretches the latencies.
func (c *client) cpuTime() time.Duration {
	if c.o.pid == 0 {
		return 0
	}
	st, err := procfs.ReadStat(c.o.pid)
	if err != nil {
		return 0
	}
	return st.CPUTime()
}

func (c *client) podConfig(i int) *runtimeapi.PodSandboxConfig {
	name := fmt.Sprintf("scale-%d-%d", os.Getpid(), i)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: name},
		Hostname: name,
		Labels:   map[string]string{label: "1", "app": name},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: c.o.cgroup},
	}
	if c.o.logDir != "" {
		cfg.LogDirectory = filepath.Join(c.o.logDir, name)
	}
	return cfg
}

func (c *client) containerConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: c.o.image},
		Command:  []string{"sleep", "36000"},
		LogPath:  "c.log",
		Labels:   map[string]string{label: "1"},
	}
}

// parallel runs fn(i) for i in [0,n) on c.o.concurrency workers and returns
// the first error and the elapsed time.
func (c *client) parallel(n int, fn func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for range c.o.concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

func (c *client) up(ctx context.Context) error {
	if c.o.containers {
		if c.o.image == "" {
			return errors.New("-image is required with containers")
		}
		t := time.Now()
		if _, err := c.im.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: c.o.image}}); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		fmt.Printf("pull %s: %v\n", c.o.image, time.Since(t).Round(time.Millisecond))
	}
	var mu sync.Mutex
	var lat []time.Duration
	d, err := c.parallel(c.o.n, func(i int) error {
		t := time.Now()
		cfg := c.podConfig(i)
		if cfg.LogDirectory != "" {
			if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
				return err
			}
		}
		pod, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: c.o.handler})
		if err != nil {
			return fmt.Errorf("run pod %d: %w", i, err)
		}
		if c.o.containers {
			ctr, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: pod.PodSandboxId, Config: c.containerConfig(), SandboxConfig: cfg,
			})
			if err != nil {
				return fmt.Errorf("create container in pod %d: %w", i, err)
			}
			if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
				return fmt.Errorf("start container in pod %d: %w", i, err)
			}
		}
		mu.Lock()
		lat = append(lat, time.Since(t))
		mu.Unlock()
		if (i+1)%100 == 0 {
			fmt.Fprintf(os.Stderr, "up: %d pods\n", i+1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(lat)
	fmt.Printf("up: %d pods at concurrency %d in %v: %.2f pods/s; per pod p50 %v p99 %v\n",
		c.o.n, c.o.concurrency, d.Round(time.Millisecond), float64(c.o.n)/d.Seconds(), q(lat, 0.5), q(lat, 0.99))
	return nil
}

func q(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i].Round(10 * time.Microsecond)
}

func (c *client) measure(ctx context.Context) error {
	c.rss("before measure")
	sel := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{label: "1"}}
	pods, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: sel})
	if err != nil {
		return err
	}
	ctrs, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		return errors.New("no pods carry the label")
	}
	fmt.Printf("measure: %d pods, %d containers listed\n", len(pods.Items), len(ctrs.Containers))
	rpcs := []struct {
		name string
		fn   func() error
	}{
		{"ListPodSandbox", func() error {
			_, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		}},
		{"ListPodSandbox(ready)", func() error {
			_, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
				State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}})
			return err
		}},
		{"ListContainers", func() error {
			_, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		}},
		{"ListContainers(pod)", func() error {
			p := pods.Items[rand.IntN(len(pods.Items))]
			_, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: p.Id}})
			return err
		}},
		{"PodSandboxStatus", func() error {
			p := pods.Items[rand.IntN(len(pods.Items))]
			_, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Id})
			return err
		}},
		{"ContainerStatus", func() error {
			if len(ctrs.Containers) == 0 {
				return nil
			}
			x := ctrs.Containers[rand.IntN(len(ctrs.Containers))]
			_, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: x.Id})
			return err
		}},
		{"ListContainerStats", func() error {
			_, err := c.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			return err
		}},
		{"ListPodSandboxStats", func() error {
			_, err := c.rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
			return err
		}},
	}
	fmt.Printf("%-24s %5s %9s %9s %9s %9s %9s\n", "rpc", "calls", "p50", "p90", "p99", "max", "cpu/call")
	for _, r := range rpcs {
		var lat []time.Duration
		cpu0 := c.cpuTime()
		budget := time.Now().Add(c.o.budget)
		for range c.o.samples {
			if time.Now().After(budget) {
				break
			}
			t := time.Now()
			if err := r.fn(); err != nil {
				fmt.Printf("%-24s error: %v\n", r.name, err)
				break
			}
			lat = append(lat, time.Since(t))
		}
		cpu := c.cpuTime() - cpu0
		slices.Sort(lat)
		perCall := time.Duration(0)
		if len(lat) > 0 {
			perCall = (cpu / time.Duration(len(lat))).Round(10 * time.Microsecond)
		}
		fmt.Printf("%-24s %5d %9v %9v %9v %9v %9v\n", r.name, len(lat), q(lat, 0.5), q(lat, 0.9), q(lat, 0.99), q(lat, 1), perCall)
	}
	c.rss("after measure")
	return nil
}

func (c *client) down(ctx context.Context) error {
	sel := map[string]string{label: "1"}
	ctrs, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}})
	if err != nil {
		return err
	}
	pods, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel}})
	if err != nil {
		return err
	}
	byPod := map[string][]string{}
	for _, x := range ctrs.Containers {
		byPod[x.PodSandboxId] = append(byPod[x.PodSandboxId], x.Id)
	}
	var errs []error
	var mu sync.Mutex
	d, _ := c.parallel(len(pods.Items), func(i int) error {
		p := pods.Items[i]
		var err error
		for _, id := range byPod[p.Id] {
			if _, e := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); e != nil {
				err = errors.Join(err, e)
			}
			if _, e := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); e != nil {
				err = errors.Join(err, e)
			}
		}
		if _, e := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); e != nil {
			err = errors.Join(err, e)
		}
		if _, e := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); e != nil {
			err = errors.Join(err, e)
		}
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("pod %s: %w", p.Id, err))
			mu.Unlock()
		}
		if c.o.logDir != "" && p.Metadata != nil {
			_ = os.RemoveAll(filepath.Join(c.o.logDir, p.Metadata.Name))
		}
		return nil
	})
	fmt.Printf("down: %d pods at concurrency %d in %v: %.2f pods/s\n", len(pods.Items), c.o.concurrency,
		d.Round(time.Millisecond), float64(len(pods.Items))/d.Seconds())
	if len(errs) > 5 {
		errs = append(errs[:5], fmt.Errorf("and %d more", len(errs)-5))
	}
	return errors.Join(errs...)
}
