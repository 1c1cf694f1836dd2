package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Rows of the comparison that podbay-bench's lifecycle modes do not have.
const (
	rpcPodStatus   = "PodSandboxStatus"
	rpcCtrStatus   = "ContainerStatus"
	rpcListPods    = "ListPodSandbox"
	rpcListCtrs    = "ListContainers"
	rpcListStats   = "ListContainerStats"
	rpcPull        = "PullImage"
	rpcImageStatus = "ImageStatus"
	rowCreateStart = "Create+StartContainer"
	rowScratch     = "pod+container from scratch"
	rowPullBig     = "PullImage (realistic)"
	rowScratchBig  = "pod+container from scratch (realistic)"
	rowThroughput  = "throughput"
)

// pod returns a new pod config of this run, named for its block; the name
// keeps podbay-bench's "bench-<run>-" prefix, which its cleanup of log
// directories matches.
func (t *target) pod(block string) *runtimeapi.PodSandboxConfig {
	t.seq++
	return t.b.namedPodConfig(fmt.Sprintf("bench-%s-%s-%d", t.b.runID, block, t.seq))
}

// container is the bench container of attempt n in pod, running image:
// each attempt its own log file, since containerd keeps a removed
// container's log.
func (t *target) container(pod *runtimeapi.PodSandboxConfig, attempt int, image string) *runtimeapi.ContainerConfig {
	c := t.b.containerFor(pod, image)
	c.Metadata.Attempt = uint32(attempt)
	c.LogPath = filepath.Join(containerName, strconv.Itoa(attempt)+".log")
	if t.b.opts.kubelet {
		c.Annotations["io.kubernetes.container.restartCount"] = strconv.Itoa(attempt)
	}
	return c
}

// call runs one RPC under the per-RPC deadline and returns its latency.
func (t *target) call(what string, fn func(context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.b.opts.timeout)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %w", what, err)
	}
	return d, nil
}

func (t *target) record(row string, d time.Duration) {
	t.samples[row] = append(t.samples[row], d)
}

func (t *target) runPod(cfg *runtimeapi.PodSandboxConfig) (string, time.Duration, error) {
	if err := t.b.preparePod(cfg); err != nil {
		return "", 0, err
	}
	var id string
	d, err := t.call(rpcRun, func(ctx context.Context) error {
		resp, err := t.b.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: t.b.opts.handler})
		id = resp.GetPodSandboxId()
		return err
	})
	return id, d, err
}

func (t *target) createContainer(podID string, pod *runtimeapi.PodSandboxConfig, attempt int, image string) (string, time.Duration, error) {
	cfg := t.container(pod, attempt, image)
	if err := t.b.prepareContainer(cfg, pod); err != nil {
		return "", 0, err
	}
	var id string
	d, err := t.call(rpcCreate, func(ctx context.Context) error {
		resp, err := t.b.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podID, Config: cfg, SandboxConfig: pod,
		})
		id = resp.GetContainerId()
		return err
	})
	return id, d, err
}

func (t *target) startContainer(id string) (time.Duration, error) {
	return t.call(rpcStart, func(ctx context.Context) error {
		_, err := t.b.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	})
}

func (t *target) pull(image string) (time.Duration, error) {
	return t.call(rpcPull, func(ctx context.Context) error {
		_, err := t.b.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})
		return err
	})
}

// removeImage removes image, untimed, and checks the daemon no longer has
// it, so that the next pull is a first pull.
func (t *target) removeImage(image string) error {
	ctx, cancel := context.WithTimeout(context.Background(), t.b.opts.timeout)
	defer cancel()
	spec := &runtimeapi.ImageSpec{Image: image}
	if _, err := t.b.images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("remove image %s: %w", image, err)
	}
	st, err := t.b.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if err != nil {
		return fmt.Errorf("image status after remove: %w", err)
	}
	if st.GetImage() != nil {
		return fmt.Errorf("image %s still present after RemoveImage", image)
	}
	return nil
}

// removePod stops and removes a pod, untimed, and its log directory.
func (t *target) removePod(id string, cfg *runtimeapi.PodSandboxConfig) error {
	if err := t.b.removePod(id); err != nil {
		return err
	}
	return t.b.removeLogDir(cfg.GetMetadata().GetName())
}

// warmUp pulls the images and runs one pod with a container, untimed: the
// pause image, the page cache and the daemon's first-use paths are then
// warm on every side before anything is timed.
func (t *target) warmUp(ctx context.Context, bigImage string) error {
	for _, image := range []string{t.b.opts.image, bigImage} {
		if image == "" {
			continue
		}
		if _, err := t.pull(image); err != nil {
			return fmt.Errorf("%s: warm-up: %w", t.name, err)
		}
	}
	cfg := t.pod("warmup")
	podID, _, err := t.runPod(cfg)
	if err != nil {
		return fmt.Errorf("%s: warm-up: %w", t.name, err)
	}
	id, _, err := t.createContainer(podID, cfg, 0, t.b.opts.image)
	if err != nil {
		return fmt.Errorf("%s: warm-up: %w", t.name, err)
	}
	if _, err := t.startContainer(id); err != nil {
		return fmt.Errorf("%s: warm-up: %w", t.name, err)
	}
	if _, err := t.b.waitLogReady(filepath.Join(cfg.GetLogDirectory(), containerName, "0.log")); err != nil {
		return fmt.Errorf("%s: warm-up: %w", t.name, err)
	}
	if err := t.removePod(podID, cfg); err != nil {
		return fmt.Errorf("%s: warm-up: %w", t.name, err)
	}
	return ctx.Err()
}

// podBlock times k pod lifecycles: Run, Status, List, Stop, Remove.
func (t *target) podBlock(ctx context.Context, k int) error {
	for range k {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cfg := t.pod("pod")
		id, d, err := t.runPod(cfg)
		if err != nil {
			return err
		}
		t.record(rpcRun, d)
		d, err = t.call(rpcPodStatus, func(ctx context.Context) error {
			resp, err := t.b.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err == nil && resp.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
				err = fmt.Errorf("pod %.13s is %s, want ready", id, resp.GetStatus().GetState())
			}
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcPodStatus, d)
		d, err = t.call(rpcListPods, func(ctx context.Context) error {
			_, err := t.b.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcListPods, d)
		d, err = t.call(rpcStop, func(ctx context.Context) error {
			_, err := t.b.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcStop, d)
		d, err = t.call(rpcRemove, func(ctx context.Context) error {
			_, err := t.b.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcRemove, d)
		if err := t.b.removeLogDir(cfg.GetMetadata().GetName()); err != nil {
			return err
		}
	}
	return nil
}

// containerBlock times k container lifecycles in one pod: Create, Start,
// (the process logs that it traps SIGTERM, untimed), Status, List, Stop (a
// graceful one: the process exits 0 on SIGTERM), Remove.
func (t *target) containerBlock(ctx context.Context, k int) error {
	cfg := t.pod("ctr")
	podID, _, err := t.runPod(cfg)
	if err != nil {
		return err
	}
	for i := range k {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		id, dc, err := t.createContainer(podID, cfg, i, t.b.opts.image)
		if err != nil {
			return err
		}
		t.record(rpcCreate, dc)
		ds, err := t.startContainer(id)
		if err != nil {
			return err
		}
		t.record(rpcStart, ds)
		t.record(rowCreateStart, dc+ds)
		logPath := filepath.Join(cfg.GetLogDirectory(), containerName, strconv.Itoa(i)+".log")
		if _, err := t.b.waitLogReady(logPath); err != nil {
			return err
		}
		d, err := t.call(rpcCtrStatus, func(ctx context.Context) error {
			resp, err := t.b.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err == nil && resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
				err = fmt.Errorf("container %.13s is %s, want running", id, resp.GetStatus().GetState())
			}
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcCtrStatus, d)
		d, err = t.call(rpcListCtrs, func(ctx context.Context) error {
			_, err := t.b.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcListCtrs, d)
		d, err = t.call(rpcStopCtr, func(ctx context.Context) error {
			_, err := t.b.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{
				ContainerId: id, Timeout: int64(t.b.opts.stopTimeout / time.Second),
			})
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcStopCtr, d)
		code, err := t.b.exitCode(id)
		if err != nil {
			return fmt.Errorf("container %.13s after StopContainer: %w", id, err)
		}
		t.exitCodes[code]++
		d, err = t.call(rpcRemoveCtr, func(ctx context.Context) error {
			_, err := t.b.client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		})
		if err != nil {
			return err
		}
		t.record(rpcRemoveCtr, d)
	}
	return t.removePod(podID, cfg)
}

// imageBlock times k first pulls of image (removed before each, untimed)
// as row, and ImageStatus of the pulled image (recorded for the rpcPull
// row's).
func (t *target) imageBlock(ctx context.Context, k int, image, row string) error {
	spec := &runtimeapi.ImageSpec{Image: image}
	for range k {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := t.removeImage(image); err != nil {
			return err
		}
		d, err := t.pull(image)
		if err != nil {
			return err
		}
		t.record(row, d)
		d, err = t.call(rpcImageStatus, func(ctx context.Context) error {
			resp, err := t.b.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
			if err == nil && resp.GetImage() == nil {
				err = fmt.Errorf("image %s not present after its pull", image)
			}
			return err
		})
		if err != nil {
			return err
		}
		if row == rpcPull {
			// The ImageStatus row is of the small image only.
			t.record(rpcImageStatus, d)
		}
	}
	return nil
}

// scratchBlock times k pods with a container from scratch as row, as
// kubelet starts a pod on a node without its image: RunPodSandbox,
// PullImage of image (removed before, untimed), CreateContainer,
// StartContainer, until the container's process has logged its first
// line.
func (t *target) scratchBlock(ctx context.Context, k int, image, row string) error {
	for range k {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := t.removeImage(image); err != nil {
			return err
		}
		cfg := t.pod("scratch")
		start := time.Now()
		podID, _, err := t.runPod(cfg)
		if err != nil {
			return err
		}
		if _, err := t.pull(image); err != nil {
			return err
		}
		id, _, err := t.createContainer(podID, cfg, 0, image)
		if err != nil {
			return err
		}
		if _, err := t.startContainer(id); err != nil {
			return err
		}
		if _, err := t.b.waitLogReady(filepath.Join(cfg.GetLogDirectory(), containerName, "0.log")); err != nil {
			return err
		}
		t.record(row, time.Since(start))
		if err := t.removePod(podID, cfg); err != nil {
			return err
		}
	}
	return nil
}

// throughputBlock runs podbay-bench's container mode once at concurrency
// c: -throughput-n pods, each with a container from create to removal
// (the image present), and records the lifecycles per second.
func (t *target) throughputBlock(ctx context.Context, c int) error {
	m := &mode{
		b:           t.b,
		concurrency: c,
		aborted:     make(chan struct{}),
		live:        map[string]*runtimeapi.PodSandboxConfig{},
		containers:  map[string]string{},
		exitCodes:   map[int32]int{},
		samples:     map[string][]time.Duration{},
	}
	start := time.Now()
	m.drive(ctx)
	elapsed := time.Since(start)
	if m.err != nil {
		return m.err
	}
	t.rates = append(t.rates, float64(m.completed)/elapsed.Seconds())
	t.samples[rowPodContainer] = append(t.samples[rowPodContainer], m.samples[rowPodContainer]...)
	return nil
}
