package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podbay-bench compare runs one workload against podbayd and the CRI
// runtimes users pick today (the anchors) on the same host, alternating
// between them so that the machine's noise hits all alike, and prints per
// operation the p50/p95 of each and the ratio podbay / the best anchor
// against issue 26's targets. hack/bench-compare.sh sets up the daemons
// (make bench-compare).

const compareUsage = `usage: podbay-bench compare [flags]

Runs the same CRI workload against podbayd and one or more anchors
(containerd 2, CRI-O, containerd 1.6), each side given by its -NAME-socket,
alternating block by block for -rounds rounds (each block -n/-rounds
samples of one kind, the sides in an order that rotates each round): every
pod, container and image RPC one by one, pulls of -image and of the
realistic -big-image, pod + container from scratch with each, throughput
at -concurrency; then, one daemon at a time, -scale pods each running a
container and the latency of the List/Status RPCs with them, and the
memory of each daemon and its per-pod processes. Every request is shaped
as the kubelet's (kubelet.go). Prints a table per podbay side (podbay;
podbay-own, podbay on its own default network) of p50/p95 per operation
for every side, the ratio podbay / the best anchor and whether issue 26's
target is met; -markdown writes the same tables as Markdown.

flags:
`

// sideNames are the sides the flags know, in the order of the table's
// columns: the anchors, then podbay's.
var sideNames = []string{"containerd2", "crio", "containerd16", "podbay", "podbay-own"}

// headlineAnchors are the anchors issue 26's ratios are against: the
// faster of them per row. Without either, the others are.
var headlineAnchors = map[string]bool{"containerd2": true, "crio": true}

func isPodbay(name string) bool { return strings.HasPrefix(name, "podbay") }

// sideOptions are one daemon's flags.
type sideOptions struct {
	name         string
	socket       string
	pid          int
	procs        string // cmdline substring of the side's per-pod processes
	logDir       string
	cgroupParent string
	handler      string
}

type compareOptions struct {
	sides        []sideOptions // those given a socket, in sideNames' order
	metricsURL   string        // podbay's
	image        string
	bigImage     string // the realistic image; "" for none
	n            int    // samples per RPC, over all rounds
	bigN         int    // samples of the realistic image's pull and scratch rows
	rounds       int
	throughputN  int // lifecycles per round and side
	concurrency  int
	scalePods    int
	scaleSamples int
	timeout      time.Duration
	stopTimeout  time.Duration
	markdown     string
	title        string
	notes        []string
	// The runtime alone (compare_floor.go); no floor without floorRuntime.
	floorRuntime, floorRootfs, floorDir, floorCgroupParent string
	// The shared conflist alone (compare_cnifloor.go); no CNI floor
	// without cniFloorConflist.
	cniFloorConflist, cniFloorBinDirs, cniFloorCacheDir, cniFloorNetnsDir string
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, "; ") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func parseCompareFlags(args []string) (compareOptions, error) {
	fs := flag.NewFlagSet("podbay-bench compare", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), compareUsage)
		fs.PrintDefaults()
	}
	var o compareOptions
	all := make([]sideOptions, len(sideNames))
	for i, name := range sideNames {
		s := &all[i]
		s.name = name
		fs.StringVar(&s.socket, name+"-socket", "", name+"'s CRI socket (the side runs when given)")
		fs.IntVar(&s.pid, name+"-pid", 0, name+"'s daemon PID, for its memory")
		fs.StringVar(&s.procs, name+"-procs", "", "a string in the command line of every per-pod process of "+name+" (conmon, containerd-shim-*), such as its state dir")
		fs.StringVar(&s.logDir, name+"-log-dir", "", "parent `dir` of "+name+"'s pod log directories")
		fs.StringVar(&s.cgroupParent, name+"-cgroup-parent", "", "cgroup parent of "+name+"'s pods")
		fs.StringVar(&s.handler, name+"-handler", "", "runtime handler of "+name+"'s pods (default: the daemon's)")
	}
	fs.StringVar(&o.metricsURL, "podbay-metrics", "", "podbayd's Prometheus endpoint (the podbay side's), for its per-phase latencies")
	fs.StringVar(&o.image, "image", "", "image every daemon pulls, with a busybox sh and sleep")
	fs.StringVar(&o.bigImage, "big-image", "", "a realistic image (several layers, ~100 MB), with a sh and sleep, for the realistic pull and from-scratch rows")
	fs.IntVar(&o.n, "n", 50, "samples per RPC and side, spread over the rounds")
	fs.IntVar(&o.bigN, "big-n", 0, "samples of the realistic image's pull and from-scratch rows per side (default -n)")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds of alternating blocks")
	fs.IntVar(&o.throughputN, "throughput-n", 20, "pod+container lifecycles per round and side in the throughput block")
	fs.IntVar(&o.concurrency, "concurrency", 10, "concurrency of the throughput block and of the scale phase's setup and teardown")
	fs.IntVar(&o.scalePods, "scale", 300, "pods (each running a container) in the scale phase; 0 skips it")
	fs.IntVar(&o.scaleSamples, "scale-samples", 200, "samples per RPC in the scale phase")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "deadline of each RPC")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 10*time.Second, "StopContainer's timeout (whole seconds)")
	fs.StringVar(&o.markdown, "markdown", "", "also write the tables as Markdown to this `file`")
	fs.StringVar(&o.title, "title", "", "a line printed above the tables (what ran)")
	fs.Var((*stringList)(&o.notes), "note", "a line printed below the tables (repeatable)")
	fs.StringVar(&o.floorRuntime, "floor-runtime", "", "also time this OCI runtime's create and start alone, each round (the floor of Create+StartContainer)")
	fs.StringVar(&o.floorRootfs, "floor-rootfs", "", "the floor's busybox root filesystem (with bin/sleep)")
	fs.StringVar(&o.floorDir, "floor-dir", "", "a new `dir` for the floor's runtime state and bundles (removed afterwards)")
	fs.StringVar(&o.floorCgroupParent, "floor-cgroup-parent", "/podbay-bench-floor", "cgroup parent of the floor's containers")
	fs.StringVar(&o.cniFloorConflist, "cni-floor-conflist", "", "also time this conflist's CNI ADD and DEL alone (libcni, no runtime), each round: the floor of RunPodSandbox and StopPodSandbox; a `file` naming its own bridge, subnet and host-local dir")
	fs.StringVar(&o.cniFloorBinDirs, "cni-floor-bin-dirs", "/usr/lib/cni:/opt/cni/bin", "the CNI floor's plugin directories, colon-separated")
	fs.StringVar(&o.cniFloorCacheDir, "cni-floor-cache-dir", "", "libcni's cache `dir` for the CNI floor (empty afterwards)")
	fs.StringVar(&o.cniFloorNetnsDir, "cni-floor-netns-dir", "", "a `dir` for the CNI floor's pinned network namespaces (empty afterwards)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	anchors, podbays := 0, 0
	for _, s := range all {
		if s.socket == "" {
			continue
		}
		if s.logDir == "" || !filepath.IsAbs(s.logDir) {
			return o, fmt.Errorf("-%s-log-dir (an absolute path) is required with -%s-socket", s.name, s.name)
		}
		if isPodbay(s.name) {
			podbays++
		} else {
			anchors++
		}
		o.sides = append(o.sides, s)
	}
	if o.bigN == 0 {
		o.bigN = o.n
	}
	switch {
	case anchors == 0 || podbays == 0:
		return o, errors.New("want at least one anchor (-containerd2-socket, -crio-socket, -containerd16-socket) and one podbay side (-podbay-socket, -podbay-own-socket)")
	case o.image == "":
		return o, errors.New("-image is required")
	case o.rounds < 1 || o.n < o.rounds:
		return o, fmt.Errorf("want 1 <= -rounds <= -n, got %d and %d", o.rounds, o.n)
	case o.bigImage != "" && (o.bigN < o.rounds):
		return o, fmt.Errorf("want -rounds <= -big-n, got %d and %d", o.rounds, o.bigN)
	case o.throughputN < 1 || o.concurrency < 1:
		return o, errors.New("-throughput-n and -concurrency must be positive")
	case o.scalePods < 0 || (o.scalePods > 0 && o.scaleSamples < 1):
		return o, errors.New("-scale must not be negative, and -scale-samples positive")
	case o.timeout <= 0 || o.stopTimeout < 0 || o.stopTimeout%time.Second != 0:
		return o, errors.New("-timeout must be positive and -stop-timeout whole seconds")
	case o.floorRuntime != "" && (o.floorRootfs == "" || o.floorDir == ""):
		return o, errors.New("-floor-runtime needs -floor-rootfs and -floor-dir")
	case o.cniFloorConflist != "" && (o.cniFloorCacheDir == "" || o.cniFloorNetnsDir == ""):
		return o, errors.New("-cni-floor-conflist needs -cni-floor-cache-dir and -cni-floor-netns-dir")
	}
	return o, nil
}

// target is one side: its client (a podbay-bench bench, whose lifecycle,
// cleanup and log code the blocks reuse) and what was measured on it.
type target struct {
	name               string
	b                  *bench
	pid                int
	procs              string
	seq                int                        // last pod number
	samples            map[string][]time.Duration // per row, over all rounds
	rates              []float64                  // throughput per round, lifecycles/s
	mem                map[string]memSample       // per moment: memStart, memIdle, memScale
	scale              map[string][]time.Duration // scale phase latencies per RPC
	scaleUp, scaleDown time.Duration              // scale phase setup and teardown
	exitCodes          map[int32]int              // after StopContainer in the container block
}

func runCompare(ctx context.Context, args []string, out io.Writer) (retErr error) {
	o, err := parseCompareFlags(args)
	if err != nil {
		return err
	}
	targets, closeConns, err := compareTargets(o, out)
	defer closeConns()
	if err != nil {
		return err
	}
	// Whatever fails, no pod or container of this run stays behind.
	defer func() {
		if retErr == nil {
			return
		}
		for _, t := range targets {
			m := &mode{b: t.b, live: map[string]*runtimeapi.PodSandboxConfig{}, containers: map[string]string{}}
			fmt.Fprintf(out, "%s: ", t.name)
			if err := m.cleanup(); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("%s: %w", t.name, err))
			}
		}
	}()

	for _, t := range targets {
		v, err := t.version(ctx)
		if err != nil {
			return fmt.Errorf("reach %s at %s: %w", t.name, t.b.opts.socket, err)
		}
		fmt.Fprintf(out, "%-12s %s %s (CRI %s) at %s, run %s\n", t.name, v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion, t.b.opts.socket, t.b.runID)
		t.mem[memStart] = t.memory()
	}
	perRound := (o.n + o.rounds - 1) / o.rounds
	bigPerRound := (o.bigN + o.rounds - 1) / o.rounds
	fmt.Fprintf(out, "workload: image %s, realistic image %s; %d rounds of alternating blocks, %d samples per RPC and block (%d per RPC; %d of the realistic image's rows); throughput %d lifecycles per round at %d-way; scale %d pods, %d samples per RPC\n",
		o.image, o.bigImage, o.rounds, perRound, perRound*o.rounds, bigPerRound*o.rounds, o.throughputN, o.concurrency, o.scalePods, o.scaleSamples)

	for _, t := range targets {
		if err := t.warmUp(ctx, o.bigImage); err != nil {
			return err
		}
	}
	var scr *scraper
	var before metricSet
	if o.metricsURL != "" {
		scr = &scraper{url: o.metricsURL}
		if before, err = scr.scrape(ctx); err != nil {
			return fmt.Errorf("scrape podbay's metrics: %w", err)
		}
	}

	blocks := compareBlocks(o, perRound, bigPerRound)
	var fl *floor
	if o.floorRuntime != "" {
		if fl, err = newFloor(o.floorRuntime, o.floorDir, o.floorRootfs, o.floorCgroupParent); err != nil {
			return err
		}
		defer func() {
			if err := fl.cleanup(context.WithoutCancel(ctx)); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("floor: %w", err))
			}
		}()
	}
	var cf *cniFloor
	if o.cniFloorConflist != "" {
		if cf, err = newCNIFloor(o.cniFloorConflist, filepath.SplitList(o.cniFloorBinDirs), o.cniFloorCacheDir, o.cniFloorNetnsDir); err != nil {
			return err
		}
		defer func() {
			if err := cf.cleanup(context.WithoutCancel(ctx)); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("CNI floor: %w", err))
			}
		}()
	}
	if err := runRounds(ctx, out, o, targets, blocks, fl, cf, perRound); err != nil {
		return err
	}
	var after metricSet
	if scr != nil {
		if after, err = scr.scrape(ctx); err != nil {
			return fmt.Errorf("scrape podbay's metrics: %w", err)
		}
	}
	for _, t := range targets {
		t.mem[memIdle] = t.memory()
	}

	// A failed or interrupted scale phase still leaves the rounds' table
	// to print; the run fails afterwards.
	scaleErr := runScale(ctx, out, o, targets)
	if err := printCompare(out, o, targets, compareFloors{fl, cf}, scr, before, after); err != nil {
		return err
	}
	return scaleErr
}

// compareTargets connects to each side of the comparison. closeConns
// closes the connections made, also on an error.
func compareTargets(o compareOptions, out io.Writer) (_ []*target, closeConns func(), _ error) {
	var conns []*grpc.ClientConn
	closeConns = func() {
		for _, c := range conns {
			c.Close()
		}
	}
	targets := make([]*target, 0, len(o.sides))
	for _, so := range o.sides {
		conn, err := grpc.NewClient("unix://"+so.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return targets, closeConns, err
		}
		conns = append(conns, conn)
		b := &bench{
			client: runtimeapi.NewRuntimeServiceClient(conn),
			images: runtimeapi.NewImageServiceClient(conn),
			out:    out,
			opts: options{
				socket:       so.socket,
				mode:         modeContainers,
				pods:         o.throughputN,
				timeout:      o.timeout,
				handler:      so.handler,
				image:        o.image,
				stopTimeout:  o.stopTimeout,
				logDir:       so.logDir,
				cgroupParent: so.cgroupParent,
				kubelet:      true,
			},
		}
		if b.runID, err = newRunID(); err != nil {
			return targets, closeConns, err
		}
		targets = append(targets, &target{
			name: so.name, b: b, pid: so.pid, procs: so.procs,
			samples: map[string][]time.Duration{}, mem: map[string]memSample{},
			scale: map[string][]time.Duration{}, exitCodes: map[int32]int{},
		})
	}
	return targets, closeConns, nil
}

// compareBlock is one block of a round: each side runs it in turn.
type compareBlock struct {
	name string
	run  func(context.Context, *target) error
}

// compareBlocks are the blocks of each round, perRound (bigPerRound for
// the realistic image) samples per RPC.
func compareBlocks(o compareOptions, perRound, bigPerRound int) []compareBlock {
	blocks := []compareBlock{
		{"pods", func(ctx context.Context, t *target) error { return t.podBlock(ctx, perRound) }},
		{"containers", func(ctx context.Context, t *target) error { return t.containerBlock(ctx, perRound) }},
		{"images", func(ctx context.Context, t *target) error { return t.imageBlock(ctx, perRound, o.image, rpcPull) }},
		{"scratch", func(ctx context.Context, t *target) error { return t.scratchBlock(ctx, perRound, o.image, rowScratch) }},
		{"throughput", func(ctx context.Context, t *target) error { return t.throughputBlock(ctx, o.concurrency) }},
	}
	if o.bigImage != "" {
		blocks = append(blocks, []compareBlock{
			{"realistic images", func(ctx context.Context, t *target) error {
				return t.imageBlock(ctx, bigPerRound, o.bigImage, rowPullBig)
			}},
			{"realistic scratch", func(ctx context.Context, t *target) error {
				return t.scratchBlock(ctx, bigPerRound, o.bigImage, rowScratchBig)
			}},
		}...)
	}
	return blocks
}

// runRounds runs o.rounds rounds of blocks on targets, and the floors'
// blocks after each.
func runRounds(ctx context.Context, out io.Writer, o compareOptions, targets []*target, blocks []compareBlock, fl *floor, cf *cniFloor, perRound int) error {
	start := time.Now()
	for r := range o.rounds {
		// The order rotates: each side goes first in a round of its own.
		order := make([]*target, 0, len(targets))
		for i := range targets {
			order = append(order, targets[(i+r)%len(targets)])
		}
		for _, bl := range blocks {
			for _, t := range order {
				if ctx.Err() != nil {
					return errors.New("interrupted")
				}
				if err := bl.run(ctx, t); err != nil {
					return fmt.Errorf("round %d, %s block, %s: %w", r+1, bl.name, t.name, err)
				}
			}
		}
		if fl != nil {
			if err := fl.block(ctx, perRound); err != nil {
				return fmt.Errorf("round %d, floor block: %w", r+1, err)
			}
		}
		if cf != nil {
			if err := cf.block(ctx, perRound); err != nil {
				return fmt.Errorf("round %d, CNI floor block: %w", r+1, err)
			}
		}
		fmt.Fprintf(out, "round %d/%d done (%s)\n", r+1, o.rounds, time.Since(start).Round(time.Second))
	}
	return nil
}

// runScale runs the scale phase on each side in turn, stopping at the
// first that fails.
func runScale(ctx context.Context, out io.Writer, o compareOptions, targets []*target) error {
	var scaleErr error
	if o.scalePods > 0 {
		for _, t := range targets {
			if err := t.scalePhase(ctx, o.scalePods, o.scaleSamples, o.concurrency); err != nil {
				scaleErr = fmt.Errorf("scale phase, %s: %w", t.name, err)
				fmt.Fprintln(out, scaleErr)
				break
			}
			fmt.Fprintf(out, "scale %s: %d pods up in %s, down in %s\n", t.name, o.scalePods, t.scaleUp.Round(time.Second), t.scaleDown.Round(time.Second))
		}
	}
	return scaleErr
}

// compareFloors are the optional floors measured beside the sides.
type compareFloors struct {
	fl *floor
	cf *cniFloor
}

// printCompare prints the comparison's tables, details and phases, and
// writes the Markdown tables where o asks.
func printCompare(out io.Writer, o compareOptions, targets []*target, floors compareFloors, scr *scraper, before, after metricSet) error {
	fl, cf := floors.fl, floors.cf
	floorP50 := math.NaN()
	if fl != nil {
		floorP50 = fl.p50()
	}
	var tables []table
	for _, pb := range targets {
		if isPodbay(pb.name) {
			tables = append(tables, buildTable(o, targets, pb, floorP50))
		}
	}
	fmt.Fprintln(out)
	if o.title != "" {
		fmt.Fprintln(out, o.title)
	}
	for _, tbl := range tables {
		if fl != nil {
			tbl.floor = fl.report(tbl)
		}
		if cf != nil {
			tbl.cniFloor = cf.report(tbl)
		}
		if fl != nil && cf != nil {
			tbl.cpuFloor = throughputBound(tbl, runtime.NumCPU(), p50ms(fl.cpu), p50ms(cf.cpu))
		}
		fmt.Fprintf(out, "\n%s\n", tbl.heading())
		tbl.printText(out)
	}
	fmt.Fprintln(out, legend)
	for _, n := range o.notes {
		fmt.Fprintln(out, "note:", n)
	}
	printDetails(out, o, targets)
	if scr != nil {
		printPhases(out, before, after)
	}
	if o.markdown != "" {
		var sb strings.Builder
		if o.title != "" {
			fmt.Fprintf(&sb, "%s\n\n", o.title)
		}
		for _, tbl := range tables {
			if fl != nil {
				tbl.floor = fl.report(tbl)
			}
			if cf != nil {
				tbl.cniFloor = cf.report(tbl)
			}
			tbl.printMarkdown(&sb)
		}
		fmt.Fprintf(&sb, "%s", legend)
		for _, n := range o.notes {
			fmt.Fprintf(&sb, " %s", n)
		}
		fmt.Fprintln(&sb)
		if err := os.WriteFile(o.markdown, []byte(sb.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.markdown, err)
		}
		fmt.Fprintf(out, "\nMarkdown tables written to %s\n", o.markdown)
	}
	return nil
}

// version asks the daemon for its version until it answers, for up to 30
// s: containerd's CRI plugin refuses calls until it has initialised.
func (t *target) version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		v, err := t.b.client.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
