// Package server implements the CRI v1 RuntimeService and ImageService of
// podbayd on top of the domain packages: sandbox records, network
// namespaces, CNI, and the OCI runtimes.
package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/apparmor"
	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/failpoint"
	"github.com/podbay/podbay/internal/live"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/network"
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
	"github.com/podbay/podbay/internal/systemd"
)

// Version is podbay's version, reported by the Version RPC.
var Version = "0.1.0-dev"

// cleanupTimeout bounds each rollback step and each recovery step.
const cleanupTimeout = 2 * time.Minute

// NetworkManager is the pod network as the server uses it; internal/network
// implements it.
type NetworkManager interface {
	Status(ctx context.Context) error
	UpdatePodCIDR(ctx context.Context, cidr string) error
	Setup(ctx context.Context, att network.Attachment) (*network.Settings, error)
	Teardown(ctx context.Context, att network.Attachment) error
	Cached() ([]network.CachedAttachment, error)
	TeardownCached(ctx context.Context, c network.CachedAttachment) error
	// ConfigInUse is the CNI network configuration in use, for Status's
	// verbose info.
	ConfigInUse(ctx context.Context) network.ConfigInUse
	// ReleaseMasquerade removes the default network's subnet-wide
	// masquerade (on a clean stop with no pod attached).
	ReleaseMasquerade(ctx context.Context) error
}

// NetNS is the pods' network namespaces as the server uses them: pinned at
// a sandbox key (netns.Path), unmounted on Stop, removed on Remove, and
// listed at start-up to find orphans. netns.Host implements it; the
// contracts are those of the netns functions of the same names.
type NetNS interface {
	Pin(path string) error
	Unmount(path string) error
	Remove(path string) error
	IsMounted(path string) (bool, error)
	InUse(path string) (bool, error)
	List(dir string) ([]string, error)
	Dial(ctx context.Context, path, address string) (net.Conn, error)
}

// CgroupReader is the host's cgroups as the server uses them: their
// statistics, processes and OOM kills, and the limits of a pod's own
// cgroup (UpdatePodSandboxResources); internal/cgroups.Reader implements
// it.
type CgroupReader interface {
	Stats(path string) (*cgroups.Stats, error)
	Procs(path string) ([]int, error)
	OOMKills(path string) (uint64, error)
	SetLimits(path string, l cgroups.Limits) (restore func() error, err error)
}

// Options are the server's dependencies and settings.
type Options struct {
	Config  *config.Config
	DB      *store.DB
	Network NetworkManager
	// NetNS pins the pods' network namespaces; nil: netns.Host, the
	// host's.
	NetNS NetNS
	// Runtimes are the usable handlers by name. Unavailable names the
	// configured handlers that could not be set up, with the reason.
	Runtimes    map[string]runtime.Runtime
	Unavailable map[string]error
	Metrics     *metrics.Metrics
	Failpoints  *failpoint.Set
	Images      ImageStore
	// Pulls, when set, serves podbay's pull progress service
	// (pulls_list.go) on the socket.
	Pulls PullProgress
	// Cgroups reads and sizes cgroups; nil disables stats and pod
	// cgroup limits.
	Cgroups CgroupReader
	// Host are the host facts container specs depend on (DetectHost).
	Host specgen.Host
	// PauseBinary is the static pause program the default pause image is
	// made from when it cannot be pulled.
	PauseBinary string
	// MinOOMScoreAdj, when set, is the lowest oom_score_adj a container may
	// be given (the daemon's own score when it lacks CAP_SYS_RESOURCE).
	MinOOMScoreAdj *int
	// TracerProvider receives a span for each RPC and its phases; nil
	// turns tracing off.
	TracerProvider trace.TracerProvider
	// StreamListener is where the sessions of Exec, Attach and
	// PortForward are served (ServeStreams); the server owns it. nil:
	// those RPCs answer Unavailable.
	StreamListener net.Listener
	// CDI resolves the CDI devices containers ask for; nil: CDI is
	// disabled. Hooks adds the configured OCI hooks; nil: none.
	CDI   CDIDevices
	Hooks OCIHooks
	// Reload sets up what a reloaded configuration adds (Reload).
	Reload ReloadHooks
	// NRI relays events to NRI plugins; nil: NRI disabled.
	NRI *nri.NRI
	// Systemd is the D-Bus connection of the systemd cgroup driver; nil
	// under cgroupfs.
	Systemd *systemd.Manager
}

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
	tracer      trace.Tracer // nil: tracing is off
	failpoints  *failpoint.Set
	images      ImageStore
	cgroups     CgroupReader
	systemd     *systemd.Manager
	host        specgen.Host
	apparmor    *apparmor.Loader    // nil: the host has no AppArmor
	stats       *podstats.Collector // ContainerStats, PodSandboxStats, metrics
	specs       runtime.SpecCache   // bundles' specs: ContainerStatus's resources, the metrics
	pauseBinary string
	minOOMScore *int
	index       *sandbox.Index
	containers  *container.Index
	pauseMu     sync.Mutex // serialises making the pause image
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
	spawner  monitorSpawner
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
		systemd:     opts.Systemd,
		host:        opts.Host,
		pauseBinary: opts.PauseBinary,
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
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
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
	s.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(s.unaryInterceptor), grpc.ForceServerCodecV2(execSyncCodec{}))
	runtimeapi.RegisterRuntimeServiceServer(s.grpc, s)
	runtimeapi.RegisterImageServiceServer(s.grpc, &imageService{store: opts.Images, intercept: s.unaryInterceptor, removals: &s.removals})
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

// Listen opens the unix socket at path, replacing a stale socket file.
// The socket is bound in a private directory beside path, given mode
// 0660 there and only then renamed into place, so that it is never
// reachable with the mode the umask gave it. Closing the listener removes
// the socket.
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	private, err := os.MkdirTemp(dir, ".sock-")
	if err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return &socketListener{UnixListener: l, path: path}, nil
}

// socketListener removes its socket file when closed, as a listener of
// net.Listen("unix") does for the name it was bound to.
type socketListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
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
	s.spawner.once.Do(func() {}) // no spawner is made from now on
	if s.spawner.sp != nil {
		s.spawner.sp.Close()
	}
}

// hit evaluates a failpoint.
func (s *Server) hit(ctx context.Context, name string) error {
	return s.failpoints.Hit(ctx, name)
}

// monitorCgroup is where the per-container monitors live (conmon for oci
// handlers, the shim for vm handlers): out of the daemon's own cgroup, so
// a service manager stopping podbayd does not take the pods' monitors with
// it. The cgroup keeps its historical name, "conmon". Under the systemd
// driver the monitors get scopes instead (placeMonitor).
func (s *Server) monitorCgroup() string {
	if s.cfg.SystemdCgroup() {
		return ""
	}
	return path.Join(s.cfg.DefaultCgroupParent, "conmon")
}

// monitorSpawner starts the monitors born in monitorCgroup (a
// cgroups.Spawner), made on first use, so that no create waits for a
// monitor's move between cgroups. Where that cannot be done the monitors
// are moved as before.
type monitorSpawner struct {
	once sync.Once
	sp   *cgroups.Spawner // nil: the monitors are moved
}

// spawnMonitor returns CreateOptions.SpawnMonitor for the monitors'
// cgroup, or nil when they are placed otherwise (under the systemd driver,
// in scopes of their own). The spawner is made when a runtime first starts
// a monitor with it (not when options are built: a runtime that starts
// none, a fake's, leaves the host's cgroups alone); where it cannot be
// made, the monitors are moved as before.
func (s *Server) spawnMonitor(ctx context.Context) func(*exec.Cmd) error {
	cg := s.monitorCgroup()
	if cg == "" {
		return nil
	}
	return func(cmd *exec.Cmd) error {
		s.spawner.once.Do(func() {
			sp, err := cgroups.NewSpawner(cg)
			if err != nil {
				log.G(ctx).Warn("monitors will be moved into their cgroup after they start", "cgroup", cg, "err", err)
				return
			}
			s.spawner.sp = sp
		})
		if s.spawner.sp == nil {
			return runtime.ErrMonitorNotSpawned
		}
		return s.spawner.sp.Start(cmd)
	}
}

func (s *Server) runtimeFor(handler string) (runtime.Runtime, error) {
	return s.current().Runtime(handler)
}

// sandboxKind is the kind of sandbox rec's pod runs: the one its record
// names, else (a record from before kinds) its handler's.
func (s *Server) sandboxKind(rec sandbox.Record) podsandbox.Kind {
	return podsandbox.KindOf(rec.Kind, s.current().Config().Runtimes[rec.RuntimeHandler].Type)
}

// sandboxController is the controller of rec's pod (see
// internal/podsandbox).
func (s *Server) sandboxController(rec sandbox.Record) (podsandbox.Controller, error) {
	return s.current().SandboxController(rec.RuntimeHandler, s.sandboxKind(rec))
}

// sandboxTraits are what the kind of sandbox handler runs declares; an
// unknown handler's are the pause container's.
func (s *Server) sandboxTraits(handler string) podsandbox.Traits {
	return podsandbox.KindFor(s.current().Config().Runtimes[handler].Type).Traits()
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
