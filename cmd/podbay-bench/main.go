// podbay-bench measures podbayd's pod lifecycle. At each concurrency it runs,
// stops and removes N pods through the CRI socket, and prints the client-side
// latency of each RPC and the throughput; given the daemon's metrics
// endpoint, it adds the daemon's own per-phase breakdown (netns, CNI,
// runtime create/start, ...), which is where a slow pod start is found.
//
// Every pod it creates carries a label with this run's ID. When a mode fails
// or is interrupted, the pods it made are stopped and removed before the
// program exits non-zero, so that a failed benchmark does not leave pods,
// namespaces or IP reservations behind.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const usage = `usage: podbay-bench [flags]

Runs, stops and removes -n pods at each concurrency in -concurrency against
podbayd's CRI socket, and prints per mode the client-side latency of each RPC
and the throughput. With -metrics, also prints the daemon's per-phase
latencies (podbay_sandbox_phase_duration_seconds) after each mode. The
daemon's summaries accumulate since it started, so for clean per-mode
quantiles run one mode per fresh daemon, as hack/bench.sh does.

flags:
`

// labelRun marks every pod of one podbay-bench process, so that cleanup can
// find pods whose RunPodSandbox the client gave up on.
const labelRun = "podbay.io/bench-run"

// podNamespace is the CRI metadata namespace of every benchmark pod.
const podNamespace = "podbay-bench"

type options struct {
	socket      string
	pods        int
	concurrency []int
	metricsURL  string
	timeout     time.Duration
	handler     string
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
		opts:   opts,
		out:    out,
	}
	if b.runID, err = newRunID(); err != nil {
		return err
	}
	if opts.metricsURL != "" {
		b.metrics = &scraper{url: opts.metricsURL}
	}

	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	v, err := b.client.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		return fmt.Errorf("reach daemon at %s: %w", opts.socket, err)
	}
	fmt.Fprintf(out, "podbay-bench: %s %s at %s, %d pods per mode, run %s\n",
		v.RuntimeName, v.RuntimeVersion, opts.socket, opts.pods, b.runID)

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
	fs.IntVar(&o.pods, "n", 50, "pods to run, stop and remove in each mode")
	conc := fs.String("concurrency", "1,10", "comma-separated concurrency levels, one mode each")
	fs.StringVar(&o.metricsURL, "metrics", "", "daemon's Prometheus endpoint, e.g. http://127.0.0.1:9090/metrics")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "deadline of each RPC")
	fs.StringVar(&o.handler, "handler", "", "runtime handler (default: the daemon's)")
	if err := fs.Parse(args); err != nil {
		return o, err
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
