package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchCommand is the container's process: a shell that exits 0 on
// SIGTERM, so that StopContainer times a graceful stop rather than its
// timeout and SIGKILL. The shell is PID 1 of the container's own PID
// namespace (as kubelet asks for by default), where a signal without a
// handler is ignored: hence the trap, and a sleep in the background that
// `wait` can be interrupted from. A SIGTERM that arrives before the trap
// is set is ignored too, and the stop then takes the whole timeout (seen
// at concurrency 10 on 2 CPUs): the shell prints readyLine once the trap
// is set, and the bench waits for that line in the container's log before
// it calls StopContainer.
var benchCommand = []string{"sh", "-c", `trap "exit 0" TERM; echo ready; sleep 3600 & wait`}

// readyLine is benchCommand's first output as a CRI log line: stream, full
// line tag and text.
const readyLine = "stdout F ready\n"

// containerName is the CRI metadata name of the bench's container in each
// pod.
const containerName = "bench"

// containerLifecycle creates, starts, stops and removes one container in
// pod podID, and returns the sum of the four RPCs' latencies; ok is false
// when a step failed, and the mode is then aborted.
//
// Between Stop and Remove it reads the container's status, untimed, to
// record its exit code: 0 is a graceful stop, 137 one that took the
// timeout and SIGKILL.
func (m *mode) containerLifecycle(podID string, pod *runtimeapi.PodSandboxConfig) (total time.Duration, ok bool) {
	podName := pod.GetMetadata().GetName()
	cfg := m.b.containerFor(pod, m.b.opts.image)
	if err := m.b.prepareContainer(cfg, pod); err != nil {
		m.fail(fmt.Errorf("pod %s: %w", podName, err))
		return 0, false
	}
	var id string
	d, err := m.call(rpcCreate, func(ctx context.Context) error {
		resp, err := m.b.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId:  podID,
			Config:        cfg,
			SandboxConfig: pod,
		})
		id = resp.GetContainerId()
		return err
	})
	if err != nil {
		// A Create the client gave up on may still finish in the daemon:
		// cleanup finds such a container by its label.
		m.fail(fmt.Errorf("create container in pod %s: %w", podName, err))
		return 0, false
	}
	total += d
	m.mu.Lock()
	m.containers[id] = podName
	m.mu.Unlock()
	if m.isAborted() {
		return 0, false
	}

	d, err = m.call(rpcStart, func(ctx context.Context) error {
		_, err := m.b.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	})
	if err != nil {
		m.fail(fmt.Errorf("start container %.13s in pod %s: %w", id, podName, err))
		return 0, false
	}
	total += d
	if m.isAborted() {
		return 0, false
	}
	// Untimed as an RPC, and not part of the sums.
	ready, err := m.b.waitReady(podName)
	if err != nil {
		m.fail(fmt.Errorf("container %.13s in pod %s: %w", id, podName, err))
		return 0, false
	}
	m.mu.Lock()
	m.samples[rowReady] = append(m.samples[rowReady], ready)
	m.mu.Unlock()
	if m.isAborted() {
		return 0, false
	}

	d, err = m.call(rpcStopCtr, func(ctx context.Context) error {
		_, err := m.b.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{
			ContainerId: id,
			Timeout:     int64(m.b.opts.stopTimeout / time.Second),
		})
		return err
	})
	if err != nil {
		m.fail(fmt.Errorf("stop container %.13s in pod %s: %w", id, podName, err))
		return 0, false
	}
	total += d
	code, err := m.b.exitCode(id)
	if err != nil {
		m.fail(fmt.Errorf("container %.13s in pod %s after StopContainer: %w", id, podName, err))
		return 0, false
	}
	m.mu.Lock()
	m.exitCodes[code]++
	m.mu.Unlock()
	if m.isAborted() {
		return 0, false
	}

	d, err = m.call(rpcRemoveCtr, func(ctx context.Context) error {
		_, err := m.b.client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		return err
	})
	if err != nil {
		m.fail(fmt.Errorf("remove container %.13s in pod %s: %w", id, podName, err))
		return 0, false
	}
	total += d
	m.mu.Lock()
	delete(m.containers, id)
	m.samples[rowContainer] = append(m.samples[rowContainer], total)
	m.mu.Unlock()
	return total, true
}

// containerLogPath is the log file of the bench's container in pod name.
func (b *bench) containerLogPath(pod string) string {
	return filepath.Join(b.logDir(pod), containerName, "0.log")
}

// waitReady waits until the container of pod name has logged readyLine,
// polling its log file, and returns how long that took after
// StartContainer returned.
func (b *bench) waitReady(pod string) (time.Duration, error) {
	return b.waitLogReady(b.containerLogPath(pod))
}

// waitLogReady waits until the container log file at path holds
// readyLine, and returns how long that took.
func (b *bench) waitLogReady(path string) (time.Duration, error) {
	start := time.Now()
	for {
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("read container log: %w", err)
		}
		if bytes.Contains(data, []byte(readyLine)) {
			return time.Since(start), nil
		}
		if time.Since(start) > b.opts.timeout {
			return 0, fmt.Errorf("container did not log %q within %s (%s)", "ready", b.opts.timeout, path)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// exitCode returns the exit code of container id, which must have exited.
func (b *bench) exitCode(id string) (int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.timeout)
	defer cancel()
	resp, err := b.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return 0, fmt.Errorf("container status: %w", err)
	}
	st := resp.GetStatus()
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return 0, fmt.Errorf("state is %s, want %s", st.GetState(), runtimeapi.ContainerState_CONTAINER_EXITED)
	}
	return st.GetExitCode(), nil
}

// containerConfig is the container the bench creates in every pod. Its
// name is the same in each: the daemon's name includes the pod's. Its log
// path is kubelet's, <container name>/<attempt>.log in the pod's log
// directory.
func (b *bench) containerConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		LogPath:  containerName + "/0.log",
		Metadata: &runtimeapi.ContainerMetadata{Name: containerName},
		Image:    &runtimeapi.ImageSpec{Image: b.opts.image},
		Command:  benchCommand,
		Labels:   map[string]string{labelRun: b.runID},
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// containerFor is the bench container of pod, with image: the kubelet's
// with -kubelet.
func (b *bench) containerFor(pod *runtimeapi.PodSandboxConfig, image string) *runtimeapi.ContainerConfig {
	c := b.containerConfig()
	c.Image.Image = image
	if b.opts.kubelet {
		b.kubeletContainer(c, pod)
	}
	return c
}

// cleanupContainers stops and removes the containers of this run the
// aborted mode knows of or the daemon lists.
func (m *mode) cleanupContainers() error {
	ids := map[string]bool{}
	for id := range m.containers {
		ids[id] = true
	}
	listed, listErr := m.b.listContainers()
	for _, id := range listed {
		ids[id] = true
	}
	var errs []error
	if listErr != nil {
		errs = append(errs, fmt.Errorf("list this run's containers: %w", listErr))
	}
	if len(ids) == 0 {
		return errors.Join(errs...)
	}
	sorted := slices.Sorted(maps.Keys(ids))
	fmt.Fprintf(m.b.out, "cleanup: stopping and removing %d container(s)\n", len(sorted))
	for _, id := range sorted {
		if err := m.b.removeContainer(id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeContainer stops a container without a grace period and removes
// it; both are idempotent in the CRI.
func (b *bench) removeContainer(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := b.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("stop container %.13s: %w", id, err)
	}
	if _, err := b.client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("remove container %.13s: %w", id, err)
	}
	return nil
}

// listContainers returns the IDs of this run's containers that the daemon
// lists, in any state.
func (b *bench) listContainers() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	resp, err := b.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelRun: b.runID}},
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range resp.GetContainers() {
		ids = append(ids, c.GetId())
	}
	slices.Sort(ids)
	return ids, nil
}

// pullImage pulls the container mode's image once, before any timing, and
// prints how long it took and whether the daemon had it already. With
// -fresh-pull it first removes the image, so that the pull is a first one.
func (b *bench) pullImage(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.timeout)
	defer cancel()
	spec := &runtimeapi.ImageSpec{Image: b.opts.image}
	st, err := b.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if err != nil {
		return fmt.Errorf("status of image %s: %w", b.opts.image, err)
	}
	present := st.GetImage() != nil
	if present && b.opts.freshPull {
		if _, err := b.images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec}); err != nil {
			return fmt.Errorf("remove image %s before the pull: %w", b.opts.image, err)
		}
		present = false
	}

	start := time.Now()
	resp, err := b.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
	d := time.Since(start)
	if err != nil {
		return fmt.Errorf("pull image %s: %w", b.opts.image, err)
	}
	kind := "first pull: the daemon did not have the image"
	if present {
		kind = "re-pull: the daemon had the image already (-fresh-pull removes it first)"
	}
	size := "size unknown"
	if st, err := b.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec}); err == nil && st.GetImage() != nil {
		size = fmt.Sprintf("%.1f MB", float64(st.GetImage().GetSize())/1e6)
	}
	fmt.Fprintf(b.out, "%-*s %s ms (%s; %.19s, %s)\n", rowWidth, "PullImage (once)", ms(d), kind, resp.GetImageRef(), size)
	return nil
}
