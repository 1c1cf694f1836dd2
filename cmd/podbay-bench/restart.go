package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// modeRestart times how long podbayd takes, from exec to answering the
// CRI, after a SIGKILL: first with no pods, then with -n pods each running
// one container (the restart a crashed daemon makes under the kubelet).
const modeRestart = "restart"

// restartRounds is how many kill-and-restart rounds each pod count gets.
const restartRounds = 5

// restartBench owns a podbayd process: it starts it, SIGKILLs it and starts
// it again, by the PID it started.
type restartBench struct {
	b       *bench
	argv    []string
	logPath string
	proc    *exec.Cmd
}

// runRestart runs the restart mode: the daemon command is args, started by
// this process (so -socket must be the socket that command serves).
func (b *bench) runRestart(ctx context.Context, argv []string, logPath string) (retErr error) {
	r := &restartBench{b: b, argv: argv, logPath: logPath}
	if _, err := r.start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := r.stop(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	fmt.Fprintf(b.out, "restart: SIGKILL podbayd, exec it again, time until it answers Version (%d rounds each)\n", restartRounds)
	if err := r.rounds(ctx, 0); err != nil {
		return err
	}
	pods, err := r.populate(ctx)
	defer func() {
		if err := r.cleanup(pods); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if err != nil {
		return err
	}
	return r.rounds(ctx, len(pods))
}

// rounds kills and restarts the daemon restartRounds times and prints the
// times to serving.
func (r *restartBench) rounds(ctx context.Context, pods int) error {
	var ds []time.Duration
	for range restartRounds {
		if err := r.kill(); err != nil {
			return err
		}
		d, err := r.start(ctx)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	fmt.Fprintf(r.b.out, "%-*s p50 %s ms, max %s ms (%d pods with a container each)\n",
		rowWidth, "restart to serving", ms(quantile(ds, 0.5)), ms(ds[len(ds)-1]), pods)
	return nil
}

// start execs the daemon in a session of its own and returns how long it
// took to answer Version. Each attempt dials afresh, so the figure is not
// a gRPC reconnect backoff.
func (r *restartBench) start(ctx context.Context) (time.Duration, error) {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start podbayd: %w", err)
	}
	r.proc = cmd
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		cmd.Wait() //nolint:errcheck // the exit is reported by the polling below
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return 0, fmt.Errorf("podbayd exited during start-up; see %s", r.logPath)
		case <-ctx.Done():
			return 0, ctx.Err()
		default:
		}
		if r.answers(ctx) {
			return time.Since(begin), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, fmt.Errorf("podbayd did not answer within 30 s; see %s", r.logPath)
}

// answers reports whether the daemon answers Version on a new connection.
func (r *restartBench) answers(ctx context.Context) bool {
	conn, err := grpc.NewClient("unix://"+r.b.opts.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err == nil
}

// kill SIGKILLs the daemon this process started and waits for it.
func (r *restartBench) kill() error {
	if r.proc == nil {
		return errors.New("no daemon to kill")
	}
	if err := r.proc.Process.Kill(); err != nil {
		return fmt.Errorf("kill podbayd: %w", err)
	}
	for range 1000 {
		if r.proc.ProcessState != nil || syscall.Kill(r.proc.Process.Pid, 0) != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.proc = nil
	return nil
}

// stop ends the daemon with SIGTERM, as an operator's service manager
// would; its pods keep running until cleanup removed them.
func (r *restartBench) stop() error {
	if r.proc == nil {
		return nil
	}
	p := r.proc
	r.proc = nil
	if err := p.Process.Signal(syscall.SIGTERM); err != nil {
		return nil // gone already
	}
	for range 600 {
		if syscall.Kill(p.Process.Pid, 0) != nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Process.Kill() //nolint:errcheck
	return errors.New("podbayd did not exit within 30 s of SIGTERM; killed")
}

// populate runs -n pods with one container each, 4 at a time, and
// returns their IDs.
func (r *restartBench) populate(ctx context.Context) ([]string, error) {
	b := r.b
	if err := b.pullImage(ctx); err != nil {
		return nil, err
	}
	type result struct {
		id  string
		err error
	}
	results := make(chan result)
	sem := make(chan struct{}, 4)
	for i := range b.opts.pods {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id, err := r.podWithContainer(ctx, i)
			results <- result{id, err}
		}()
	}
	var ids []string
	var errs []error
	for range b.opts.pods {
		res := <-results
		if res.id != "" {
			ids = append(ids, res.id)
		}
		if res.err != nil {
			errs = append(errs, res.err)
		}
	}
	return ids, errors.Join(errs...)
}

// podWithContainer runs pod i and starts one container in it; the pod's ID
// is returned even when the container failed, for cleanup.
func (r *restartBench) podWithContainer(ctx context.Context, i int) (string, error) {
	b := r.b
	ctx, cancel := context.WithTimeout(ctx, b.opts.timeout)
	defer cancel()
	cfg := b.podConfig(0, i)
	if dir := cfg.GetLogDirectory(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
	}
	pod, err := b.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: b.opts.handler})
	if err != nil {
		return "", fmt.Errorf("run pod %d: %w", i, err)
	}
	ctr, err := b.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.PodSandboxId, Config: b.containerConfig(), SandboxConfig: cfg,
	})
	if err != nil {
		return pod.PodSandboxId, fmt.Errorf("create container in pod %d: %w", i, err)
	}
	if _, err := b.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		return pod.PodSandboxId, fmt.Errorf("start container in pod %d: %w", i, err)
	}
	return pod.PodSandboxId, nil
}

// cleanup removes this run's containers and pods through the restarted
// daemon, retrying while it still recovers them.
func (r *restartBench) cleanup(pods []string) error {
	b := r.b
	var errs []error
	ids, err := b.listContainers()
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range ids {
		if err := retryUnavailable(func() error { return b.removeContainer(id) }); err != nil {
			errs = append(errs, err)
		}
	}
	listed, err := b.listPods()
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(append(pods, listed...)))) {
		if err := retryUnavailable(func() error { return b.removePod(id) }); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.removeLogDirs(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// retryUnavailable calls fn up to 10 times while it fails with a transient
// error.
func retryUnavailable(fn func() error) error {
	var err error
	for range 10 {
		if err = fn(); err == nil || !strings.Contains(err.Error(), "Unavailable") {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}
