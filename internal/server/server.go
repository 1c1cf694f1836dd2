// Package server implements the CRI v1 RuntimeService and ImageService of
// podbayd on top of the domain packages: sandbox records, network
// namespaces, CNI, and the OCI runtimes.
package server

import (
	"context"
	"errors"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/apparmor"
	"github.com/podbay/podbay/internal/cgroupdriver"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/failpoint"
	"github.com/podbay/podbay/internal/grpcserver"
	"github.com/podbay/podbay/internal/live"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/nri"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/podstats"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
	"github.com/podbay/podbay/internal/store"
	"github.com/podbay/podbay/internal/streaming"
)

// Version is podbay's version, reported by the Version RPC.
var Version = "0.1.0-dev"

// cleanupTimeout bounds each rollback step and each recovery step.
const cleanupTimeout = 2 * time.Minute

// Server serves the CRI.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	// cfg is the configuration the daemon started with; a reload does
	// not change it. Read from it only what needs a restart (paths,
	// cgroup parent, streaming); the reloadable settings and the runtime
	// handlers are in live (current()).
	cfg         *config.Config
	live        *live.State
	reloadHooks ReloadHooks
	db          *store.DB
	network     *swapNetwork // the NetworkManager a reload may replace
	netns       NetNS
	metrics     *metrics.Metrics
	rpc         *grpcserver.Interceptor // every RPC runs through it (unaryInterceptor)
	failpoints  *failpoint.Set
	images      ImageStore
	cgroups     CgroupReader
	cg          *cgroupdriver.Driver
	host        specgen.Host
	apparmor    *apparmor.Loader    // nil: the host has no AppArmor
	stats       *podstats.Collector // ContainerStats, PodSandboxStats, metrics
	specs       runtime.SpecCache   // bundles' specs: ContainerStatus's resources, the metrics
	pause       *podsandbox.PauseImages
	minOOMScore *int
	index       *sandbox.Index
	containers  *container.Index
	cdi         CDIDevices // nil: CDI disabled
	hooks       OCIHooks   // nil: no OCI hooks

	// ctx lives as long as the server; background work (exit watchers,
	// parked sandboxes) stops with it.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup
	// removals are RemoveContainer's removals finished in the background
	// (container_remove_async.go).
	removals containerRemovals
	// recovered is closed when the background part of Recover is done.
	recovered chan struct{}

	grpc    *grpc.Server
	streams *streaming.Server // nil without Options.StreamListener
	nri     *nri.NRI          // nil when NRI is disabled

	events       *eventBroadcaster // GetContainerEvents (container_events.go)
	eventMetrics *metrics.ContainerEvents

	// execOutputs bounds the ExecSyncs that hold a large output at once
	// (container_execsync.go).
	execOutputs *runtime.OutputGate
}

// New returns a server. Call Recover before Serve.
func New(opts Options) (*Server, error) {
	if opts.Config == nil || opts.DB == nil || opts.Network == nil || opts.Images == nil || len(opts.Runtimes) == 0 {
		return nil, errors.New("server: config, database, network, image store and at least one runtime are required")
	}
	if opts.NetNS == nil {
		opts.NetNS = netns.Host{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:         opts.Config,
		db:          opts.DB,
		network:     newSwapNetwork(opts.Network),
		netns:       opts.NetNS,
		metrics:     opts.Metrics,
		failpoints:  opts.Failpoints,
		images:      opts.Images,
		cgroups:     opts.Cgroups,
		cg:          newCgroupDriver(opts),
		host:        opts.Host,
		pause:       podsandbox.NewPauseImages(opts.Images, opts.PauseBinary),
		minOOMScore: opts.MinOOMScoreAdj,
		cdi:         opts.CDI,
		hooks:       opts.Hooks,
		execOutputs: runtime.NewOutputGate(maxLargeExecOutputs),
		index:       sandbox.NewIndex(),
		containers:  container.NewIndex(),
		ctx:         ctx,
		cancel:      cancel,
		recovered:   make(chan struct{}),
		nri:         opts.NRI,
	}
	s.rpc = grpcserver.NewInterceptor(opts.Metrics, opts.TracerProvider)
	if opts.Host.AppArmorDefaultProfile != "" {
		s.apparmor = &apparmor.Loader{Dir: filepath.Join(opts.Config.State, "apparmor")}
	}
	s.eventMetrics = opts.Metrics.NewContainerEvents()
	s.events = newEventBroadcaster(s.eventMetrics)
	s.live = live.NewState(live.NewConfig(opts.Config, maps.Clone(opts.Runtimes), maps.Clone(opts.Unavailable)))
	s.reloadHooks = opts.Reload
	if opts.StreamListener != nil {
		tlsCfg, err := streamTLS(opts.Config)
		if err != nil {
			cancel()
			return nil, err
		}
		streams, err := streaming.New(opts.StreamListener, streamRuntime{s: s}, streaming.Config{
			IdleTimeout: time.Duration(opts.Config.StreamIdleTimeout),
			BaseContext: ctx,
			TLS:         tlsCfg,
		})
		if err != nil {
			cancel()
			return nil, err
		}
		s.streams = streams
	}
	s.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(s.unaryInterceptor), grpc.ForceServerCodecV2(grpcserver.ExecSyncCodec{}))
	runtimeapi.RegisterRuntimeServiceServer(s.grpc, s)
	runtimeapi.RegisterImageServiceServer(s.grpc, s.newImageService())
	if opts.Pulls != nil {
		s.grpc.RegisterService(&pullsServiceDesc, pullsServer{source: opts.Pulls})
	}
	s.stats = podstats.New(s.statsSources(opts))
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.stats.Run(s.ctx, s.recovered)
	}()
	return s, nil
}

// Serve serves the CRI on l until Shutdown or Close.
func (s *Server) Serve(l net.Listener) error {
	return s.grpc.Serve(l)
}

// ServeStreams serves the streaming sessions until Shutdown; without
// Options.StreamListener it returns nil at once.
func (s *Server) ServeStreams() error {
	if s.streams == nil {
		return nil
	}
	return s.streams.Serve()
}

// StreamAddr is the address of the streaming server, nil without one.
func (s *Server) StreamAddr() net.Addr {
	if s.streams == nil {
		return nil
	}
	return s.streams.Addr()
}

// Shutdown stops accepting RPCs and waits for those in flight until ctx ends,
// ends the streaming sessions (killing the processes of interactive execs),
// then stops background work. Pods keep running: their conmon monitors do
// not depend on the daemon.
func (s *Server) Shutdown(ctx context.Context) {
	s.events.Close() // ends the event streams, which GracefulStop waits for
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
	}
	if s.streams != nil {
		if err := s.streams.Shutdown(ctx); err != nil {
			log.G(ctx).Warn("stop streaming server", "err", err)
		}
	}
	s.cancel()
	s.bg.Wait()
	s.releaseMasqueradeIfIdle(ctx)
	s.cg.Close()
}

// unaryInterceptor runs an RPC through s's interceptor
// (grpcserver.Interceptor): logs, metrics, trace span, error codes.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return s.rpc.Unary(ctx, req, info, handler)
}

// hit evaluates a failpoint.
func (s *Server) hit(ctx context.Context, name string) error {
	return s.failpoints.Hit(ctx, name)
}

// pinRoot is where pinned sandboxes' namespaces are pinned (podns.Root).
func (s *Server) pinRoot() string { return podns.Root(s.cfg.State) }

// shmRoot is where pods' shared /dev/shm are mounted (podshm.Root).
func (s *Server) shmRoot() string { return podshm.Root(s.cfg.State) }

// podNamespaces are the paths of the namespaces rec's containers join:
// its netns, and its pinned IPC and UTS namespaces or its sandbox
// process.
func podNamespaces(rec sandbox.Record) podsandbox.Namespaces {
	return podsandbox.Namespaces{Net: rec.NetworkSettings.SandboxKey, IPC: rec.Pins.IPC, UTS: rec.Pins.UTS, Pid: rec.Pid}
}

// statsSources are what the statistics are read from: the server's
// indexes, cgroups and image store, and each handler's runtime where it
// reports its containers' statistics itself.
func (s *Server) statsSources(opts Options) podstats.Sources {
	src := podstats.Sources{
		Sandboxes:        s.index,
		Containers:       s.containers,
		TaskOf:           s.statsTask,
		Rootfs:           opts.Images,
		StorageRoot:      opts.Config.Image.StorageRoot,
		SandboxCgroupDir: s.sandboxCgroupDir,
		PodCgroupDir:     s.podCgroupDir,
		Specs:            &s.specs,
		Period:           time.Duration(opts.Config.StatsCollectPeriod),
	}
	if opts.Cgroups != nil { // a nil CgroupReader is no podstats.Cgroups
		src.Cgroups = opts.Cgroups
	}
	return src
}

// statsTask is the runtime of rec's handler when it reports rec's
// statistics and processes itself, else nil.
func (s *Server) statsTask(rec container.Record) runtime.TaskReporter {
	return s.containerCapabilities(rec).Tasks
}
