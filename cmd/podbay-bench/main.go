// podbay-bench measures podbayd's pod and container lifecycles. At each
// concurrency it runs N lifecycles through the CRI socket, and prints the
// client-side latency of each RPC and the throughput; given the daemon's
// metrics endpoint, it adds the daemon's own per-phase breakdown (netns,
// CNI, runtime create/start, ...), which is where a slow pod start is found.
//
// A lifecycle is, with -mode pods, RunPodSandbox, StopPodSandbox and
// RemovePodSandbox; with -mode containers, a pod with one container:
// RunPodSandbox, CreateContainer, StartContainer, StopContainer,
// RemoveContainer, StopPodSandbox and RemovePodSandbox. The container mode
// pulls its image once, timed, before the first concurrency.
//
// Every pod and container it creates carries a label with this run's ID.
// When a mode fails or is interrupted, the containers and pods it made are
// stopped and removed before the program exits non-zero, so that a failed
// benchmark does not leave containers, pods, namespaces or IP reservations
// behind.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const usage = `usage: podbay-bench [flags]

Runs -n lifecycles at each concurrency in -concurrency against podbayd's CRI
socket, and prints per concurrency the client-side latency of each RPC and
the throughput. -mode pods runs, stops and removes pods; -mode containers
runs a pod, creates, starts, stops and removes one container in it (-image,
pulled once before timing), then stops and removes the pod. With -metrics,
also prints the daemon's per-phase latencies
(podbay_sandbox_phase_duration_seconds) after each concurrency. The daemon's
summaries accumulate since it started, so for clean per-concurrency
quantiles run one concurrency per fresh daemon, as hack/bench.sh does.

podbay-bench compare [flags] runs one workload against containerd and podbayd,
alternating, and prints the ratio per operation (hack/bench-compare.sh;
podbay-bench compare -h).

flags:
`

// labelRun marks every pod of one podbay-bench process, so that cleanup can
// find pods whose RunPodSandbox the client gave up on.
const labelRun = "podbay.io/bench-run"

// podNamespace is the CRI metadata namespace of every benchmark pod.
const podNamespace = "podbay-bench"

// Benchmark modes: what one lifecycle is.
const (
	modePods       = "pods"
	modeContainers = "containers"
)

type options struct {
	socket       string
	mode         string // modePods or modeContainers
	pods         int
	concurrency  []int
	metricsURL   string
	timeout      time.Duration
	handler      string
	image        string        // the container mode's image
	freshPull    bool          // remove -image before the timed pull
	stopTimeout  time.Duration // StopContainer's grace period
	logDir       string        // parent of the pods' log directories; "" for none
	daemon       []string      // the restart mode's podbayd command line
	daemonLog    string        // where the restart mode's podbayd logs
	cgroupParent string        // the pods' cgroup parent; "" for the daemon's default
	kubelet      bool          // configs as the kubelet sends them (kubelet.go)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal aborts the current mode, which still cleans up; a
	// second one kills the process.
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "podbay-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(ctx, args[1:], out)
	}
	opts, err := parseFlags(args)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+opts.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()

	b := &bench{
		client: runtimeapi.NewRuntimeServiceClient(conn),
		images: runtimeapi.NewImageServiceClient(conn),
		opts:   opts,
		out:    out,
	}
	if b.runID, err = newRunID(); err != nil {
		return err
	}
	if opts.metricsURL != "" {
		b.metrics = &scraper{url: opts.metricsURL}
	}
	if opts.mode == modeRestart {
		return b.runRestart(ctx, opts.daemon, opts.daemonLog)
	}

	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	v, err := b.client.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		return fmt.Errorf("reach daemon at %s: %w", opts.socket, err)
	}
	fmt.Fprintf(out, "podbay-bench: %s %s at %s, mode %s, %d pods per concurrency, run %s\n",
		v.RuntimeName, v.RuntimeVersion, opts.socket, opts.mode, opts.pods, b.runID)
	if opts.mode == modeContainers {
		fmt.Fprintf(out, "container: %s running %s %s '%s'; StopContainer (timeout %s) once it has logged ready\n",
			opts.image, benchCommand[0], benchCommand[1], benchCommand[2], opts.stopTimeout)
		if err := b.pullImage(ctx); err != nil {
			return err
		}
	}

	for _, c := range opts.concurrency {
		if err := b.runMode(ctx, c); err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
	}
	return nil
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("podbay-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var o options
	fs.StringVar(&o.socket, "socket", "/run/podbay/podbay.sock", "podbayd's CRI socket")
	fs.StringVar(&o.mode, "mode", modePods, "what to time: pods (run, stop, remove a pod), containers (a pod with one container, created to removed) or restart (SIGKILL and restart the daemon given after the flags, with no pods and with -n pods)")
	fs.IntVar(&o.pods, "n", 50, "lifecycles (pods) at each concurrency")
	conc := fs.String("concurrency", "1,10", "comma-separated concurrency levels, run one after the other")
	fs.StringVar(&o.metricsURL, "metrics", "", "daemon's Prometheus endpoint, e.g. http://127.0.0.1:9090/metrics")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "deadline of each RPC")
	fs.StringVar(&o.handler, "handler", "", "runtime handler (default: the daemon's)")
	fs.StringVar(&o.image, "image", "", "the container mode's image, with a busybox sh and sleep, e.g. 127.0.0.1:5000/test/busybox:latest")
	fs.BoolVar(&o.freshPull, "fresh-pull", false, "remove -image first if the daemon has it, so that the timed pull is a first pull (for a daemon the bench owns)")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 10*time.Second, "StopContainer's timeout (whole seconds) before SIGKILL")
	fs.StringVar(&o.daemonLog, "daemon-log", "podbayd-restart.log", "-mode restart: the daemon's log `file` (appended)")
	fs.StringVar(&o.logDir, "log-dir", "", "give each pod a log directory under this `dir`, as kubelet does, and remove it after the pod; the container mode needs it, and runs on the daemon's host")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch o.mode {
	case modePods:
	case modeRestart:
		// The daemon command follows the flags: podbay-bench starts,
		// kills and restarts it itself.
		if fs.NArg() == 0 || o.image == "" || o.logDir == "" {
			return o, errors.New("-mode restart needs -image, -log-dir and the podbayd command line after the flags")
		}
		o.daemon = fs.Args()
		o.concurrency = []int{1}
		return o, nil
	case modeContainers:
		if o.image == "" {
			return o, errors.New("-mode containers needs -image")
		}
		// The bench reads the container's log to know that its process
		// handles SIGTERM before it stops it.
		if o.logDir == "" {
			return o, errors.New("-mode containers needs -log-dir")
		}
	default:
		return o, fmt.Errorf("-mode: want %s, %s or %s, got %q", modePods, modeContainers, modeRestart, o.mode)
	}
	if o.logDir != "" && !filepath.IsAbs(o.logDir) {
		return o, fmt.Errorf("-log-dir must be an absolute path, got %q", o.logDir)
	}
	if o.stopTimeout < 0 || o.stopTimeout%time.Second != 0 {
		return o, fmt.Errorf("-stop-timeout must be whole seconds, got %s", o.stopTimeout)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.pods < 1 {
		return o, fmt.Errorf("-n must be at least 1, got %d", o.pods)
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("-timeout must be positive")
	}
	for _, f := range strings.FieldsFunc(*conc, func(r rune) bool { return r == ',' || r == ' ' }) {
		c, err := strconv.Atoi(f)
		if err != nil || c < 1 {
			return o, fmt.Errorf("-concurrency: %q is not a positive integer", f)
		}
		o.concurrency = append(o.concurrency, c)
	}
	if len(o.concurrency) == 0 {
		return o, fmt.Errorf("-concurrency names no level")
	}
	return o, nil
}

func newRunID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate run id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
