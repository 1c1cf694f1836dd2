// podbayd is podbay's CRI daemon: kubelet, crictl and critest talk to it
// over the CRI v1 gRPC API on a unix socket.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/failpoint"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/oci"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sdnotify"
	"github.com/podbay/podbay/internal/server"
	"github.com/podbay/podbay/internal/shim"
	"github.com/podbay/podbay/internal/socket"
	"github.com/podbay/podbay/internal/specgen"
	"github.com/podbay/podbay/internal/store"
	"github.com/podbay/podbay/internal/systemd"
)

func main() {
	// containers/storage unpacks layers in a re-executed copy of this
	// binary; in that child, this runs the unpacking and returns true.
	if image.ReexecInit() {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "podbayd:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "config" {
		return printConfig(os.Stdout, os.Args[2:])
	}
	// A SIGHUP before the daemon serves must not kill it; watchReloads
	// handles it from then on.
	signal.Ignore(syscall.SIGHUP)
	flags := parseFlags("podbayd", os.Args[1:])
	if flags.version {
		fmt.Println("podbayd", server.Version)
		return nil
	}
	raw, cfg, err := flags.loadValid()
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	logger := newLogger(cfg, level)
	slog.SetDefault(logger)
	// The kubelet's streaming server logs through klog.
	klog.SetSlogLogger(logger)
	setLogLevel(level, cfg.LogLevel)
	ctx := log.WithLogger(context.Background(), logger)

	// Only a daemon built with the failpoints tag (the integration tests')
	// reads PODBAY_FAILPOINTS; without it fps is empty.
	fps, err := failpoint.FromEnv()
	if err != nil {
		return err
	}

	d, err := newDaemon(ctx, cfg, fps)
	if err != nil {
		return err
	}
	d.level, d.flags, d.running = level, flags, raw
	return d.serve(ctx)
}

// newLogger logs at level, which a reload changes (setLogLevel).
func newLogger(cfg *config.Config, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

type daemon struct {
	cfg     *config.Config
	db      *store.DB
	srv     *server.Server
	metrics *metrics.Metrics
	closers []func() error

	// What a reload needs: the conmon binary, the log level, the
	// command line and the configuration the daemon started with
	// (before Validate).
	conmon  string
	systemd *systemd.Manager // the systemd cgroup driver's; nil under cgroupfs
	level   *slog.LevelVar
	flags   *cliFlags
	running *config.Config
}

func newDaemon(ctx context.Context, cfg *config.Config, fps *failpoint.Set) (_ *daemon, retErr error) {
	d := &daemon{cfg: cfg, metrics: metrics.New()}
	defer func() {
		if retErr != nil {
			d.close()
		}
	}()
	// First, so that its closer runs last: after the RPCs in flight at
	// shutdown finished their spans.
	tp, closeTracing, err := newTracerProvider(ctx, cfg.Tracing)
	if err != nil {
		return nil, err
	}
	if closeTracing != nil {
		d.closers = append(d.closers, closeTracing)
	}
	if err := d.openStore(ctx); err != nil {
		return nil, err
	}

	netw, err := newNetwork(cfg)
	if err != nil {
		return nil, fmt.Errorf("set up CNI: %w", err)
	}

	runtimes, unavailable, err := d.newRuntimes(ctx)
	if err != nil {
		return nil, err
	}

	pauseBin, err := findPause(cfg.PauseBinary)
	if err != nil {
		// Only the default pause image needs it, and only offline.
		log.G(ctx).Warn("no built-in pause program; the pause image must be pullable", "err", err)
	}
	images, err := d.openImages(ctx)
	if err != nil {
		return nil, err
	}

	cg, minScore, host, err := detectHost(cfg)
	if err != nil {
		return nil, err
	}
	cdiDevices, ociHooks, err := d.specInjectors(ctx)
	if err != nil {
		return nil, err
	}
	streamL, err := net.Listen("tcp", cfg.StreamListenAddress())
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	srv, err := server.New(server.Options{
		Config:         cfg,
		DB:             d.db,
		Network:        netw,
		NetNS:          netns.Host{},
		Runtimes:       runtimes,
		Unavailable:    unavailable,
		Metrics:        d.metrics,
		Failpoints:     fps,
		Images:         images,
		Pulls:          images,
		Cgroups:        cg,
		Host:           host,
		PauseBinary:    pauseBin,
		MinOOMScoreAdj: minScore,
		TracerProvider: tp,
		StreamListener: streamL,
		CDI:            cdiDevices,
		Hooks:          ociHooks,
		Reload:         d.reloadHooks(),
		NRI:            newNRI(cfg, cdiDevices),
		Systemd:        d.systemd,
	})
	if err != nil {
		streamL.Close()
		return nil, err
	}
	d.srv = srv
	// Closes the handlers a reload set up or replaced; closing one twice
	// does nothing.
	d.closers = append(d.closers, srv.CloseRuntimes)
	if err := srv.Recover(ctx); err != nil {
		return nil, err
	}
	if err := d.startNRI(); err != nil {
		return nil, err
	}
	srv.WarmPauseImage()
	return d, nil
}

// openStore makes the daemon's directories and opens its database.
func (d *daemon) openStore(ctx context.Context) error {
	cfg := d.cfg
	for _, dir := range []string{cfg.Root, cfg.State, cfg.NetNSDir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	// A corrupt database is moved aside rather than keeping the node down:
	// Recover's garbage collection then reclaims what its pods held.
	db, err := store.OpenOrQuarantine(ctx, filepath.Join(cfg.Root, "podbay.db"))
	if err != nil {
		return err
	}
	d.db = db
	d.closers = append(d.closers, db.Close)

	// Before anything can run a CNI DEL: a plugin a killed daemon left
	// running would otherwise finish its ADD after recovery undid the pod.
	// Only now, with the database's lock held: a second podbayd started
	// by mistake must fail on the lock, not kill the first one's plugins.
	if _, err := network.KillOrphanedPlugins(ctx, cfg.NetNSDir); err != nil {
		log.G(ctx).Warn("kill cni plugins a previous podbayd left running", "err", err)
	}
	return nil
}

// newRuntimes finds conmon, connects to systemd for its cgroup driver,
// and sets up the configured runtime handlers; a handler that cannot be
// set up is unavailable (with why), unless it is the default.
func (d *daemon) newRuntimes(ctx context.Context) (map[string]runtime.Runtime, map[string]error, error) {
	cfg := d.cfg
	conmon, err := config.LookPath(cfg.Conmon)
	if err != nil {
		return nil, nil, fmt.Errorf("conmon %q: %w", cfg.Conmon, err)
	}
	d.conmon = conmon
	if cfg.SystemdCgroup() {
		if d.systemd, err = systemd.NewManager(ctx); err != nil {
			return nil, nil, fmt.Errorf("cgroup_driver systemd: %w", err)
		}
		d.closers = append(d.closers, d.systemd.Close)
	}
	runtimes := map[string]runtime.Runtime{}
	unavailable := map[string]error{}
	for _, name := range cfg.RuntimeNames() {
		rt, closer, err := newRuntime(name, cfg, d.conmon, d.systemd)
		if err != nil {
			unavailable[name] = err
			log.G(ctx).Warn("runtime handler unavailable", "handler", name, "err", err)
			continue
		}
		d.closers = append(d.closers, closer)
		runtimes[name] = rt
		log.G(ctx).Info("runtime handler ready", "handler", name, "type", cfg.Runtimes[name].Type)
	}
	if _, ok := runtimes[cfg.DefaultRuntime]; !ok {
		return nil, nil, fmt.Errorf("default runtime %q is not available: %w", cfg.DefaultRuntime, unavailable[cfg.DefaultRuntime])
	}
	return runtimes, unavailable, nil
}

// openImages opens the image store.
func (d *daemon) openImages(ctx context.Context) (*image.Store, error) {
	images, err := image.New(ctx, image.Config{
		StorageRoot:       d.cfg.Image.StorageRoot,
		RunRoot:           d.cfg.Image.RunRoot,
		Driver:            d.cfg.Image.Driver,
		DriverOptions:     d.cfg.Image.DriverOptions,
		RegistriesConf:    d.cfg.Image.RegistriesConf,
		RegistriesConfDir: d.cfg.Image.RegistriesConfDir,
		PolicyPath:        d.cfg.Image.SignaturePolicy,
		PolicyDir:         d.cfg.Image.SignaturePolicyDir,
		PinnedImages:      []string{d.cfg.PauseImage},
		Metrics:           d.metrics.Registry,

		PullProgressTimeout:    time.Duration(d.cfg.Image.PullProgressTimeout),
		MaxConcurrentDownloads: d.cfg.Image.MaxConcurrentDownloads,
		GzipDecompressor:       d.cfg.Image.GzipDecompressor,
		SyncRootfsRecords:      d.cfg.Image.SyncRootfsRecords,
		PartialMaxBytes:        partialMaxBytes(d.cfg.Image.PartialMaxBytes),
		PartialTTL:             time.Duration(d.cfg.Image.PartialTTL),
	})
	if err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	d.closers = append(d.closers, images.Close)
	return images, nil
}

// detectHost reads the host's cgroups and the facts that change a
// container's spec.
func detectHost(cfg *config.Config) (*cgroups.Reader, *int, specgen.Host, error) {
	cg, err := cgroups.New(cgroups.DefaultRoot)
	if err != nil {
		return nil, nil, specgen.Host{}, fmt.Errorf("cgroups: %w", err)
	}
	minScore, err := minOOMScoreAdj(cfg.RestrictOOMScoreAdj)
	if err != nil {
		return nil, nil, specgen.Host{}, err
	}
	host, err := server.DetectHost(cg.Mode() == cgroups.V2, minScore)
	if err != nil {
		return nil, nil, specgen.Host{}, fmt.Errorf("detect host: %w", err)
	}
	return cg, minScore, host, nil
}

func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		_ = d.closers[i]()
	}
}

// serve runs until SIGTERM or SIGINT, then shuts down leaving pods running.
func (d *daemon) serve(ctx context.Context) error {
	defer d.close()
	l, err := socket.Listen(d.cfg.Listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 3)
	go func() { errc <- d.srv.Serve(l) }()
	go func() {
		if err := d.srv.ServeStreams(); err != nil {
			errc <- fmt.Errorf("streaming server: %w", err)
		}
	}()

	var metricsSrv *http.Server
	if d.cfg.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{}))
		if d.cfg.DebugPprof {
			handlePprof(mux)
		}
		metricsSrv = &http.Server{Addr: d.cfg.MetricsAddress, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := metricsSrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics endpoint: %w", err)
			}
		}()
	}
	log.G(ctx).Info("podbayd serving", "socket", d.cfg.Listen, "streaming", d.srv.StreamAddr().String(), "metrics", d.cfg.MetricsAddress, "version", server.Version)

	stopReloads := d.watchReloads(ctx)
	defer stopReloads()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	notify(ctx, sdnotify.Ready) // recovered, the CRI socket listens, SIGTERM is handled
	select {
	case sig := <-sigs:
		log.G(ctx).Info("shutting down; pods keep running", "signal", sig.String())
		notify(ctx, sdnotify.Stopping)
	case err := <-errc:
		if err != nil {
			return err
		}
	}
	shutdownCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(shutdownCtx)
	}
	stopReloads() // no reload starts work on a server shutting down
	d.srv.Shutdown(shutdownCtx)
	_ = os.Remove(d.cfg.Listen)
	return nil
}

// findPause locates the pause program: the configured path, else
// podbay-pause beside podbayd, else in PATH.
// partialMaxBytes maps [image] partial_max_bytes to image.Config's: 0
// there (keep none) is negative here, where 0 is the default.
func partialMaxBytes(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

func findPause(configured string) (string, error) {
	if configured != "" {
		return config.LookPath(configured)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "podbay-pause")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := config.LookPath("podbay-pause")
	if err != nil {
		return "", fmt.Errorf("pause program not found (set pause_binary): %w", err)
	}
	return p, nil
}

// minOOMScoreAdj returns the lowest oom_score_adj podbay may ask a runtime
// for, or nil for no limit. Without CAP_SYS_RESOURCE a process cannot lower
// its score, and runc then fails to start the container: with the sandbox
// default of -998 no pod would start on such a host.
func minOOMScoreAdj(mode string) (*int, error) {
	restrict := mode == "true"
	if mode == "auto" {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return nil, fmt.Errorf("read capabilities: %w", err)
		}
		restrict = data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) == 0
	}
	if !restrict {
		return nil, nil
	}
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return nil, fmt.Errorf("read own oom_score_adj: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("parse own oom_score_adj: %w", err)
	}
	// conmon resets the runtime's score to 0 before it runs it, so without
	// CAP_SYS_RESOURCE nothing below 0 can be set even if ours is lower.
	v = max(v, 0)
	return &v, nil
}

// newRuntime sets up one runtime handler: an OCI runtime under conmon, or
// a shim v2 binary (a VM runtime such as Kata).
func newRuntime(name string, cfg *config.Config, conmon string, sd *systemd.Manager) (runtime.Runtime, func() error, error) {
	rc := cfg.Runtimes[name]
	path, err := config.LookPath(rc.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime binary %q: %w", rc.Path, err)
	}
	if rc.Type == config.TypeVM {
		sc := shim.Config{Name: name, ShimPath: path, StateDir: rc.Root,
			CreateTimeout: time.Duration(rc.Timeout), CommandTimeout: time.Duration(rc.Timeout)}
		switch {
		case rc.ConfigPath != "":
			sc.Options, err = shim.ConfigPathOptions(rc.ConfigPath, rc.OptionsType)
		case rc.RuntimePath != "" || rc.RuntimeRoot != "" || (sd != nil && runcShim(rc, path)):
			bin := rc.RuntimePath
			if bin != "" {
				if bin, err = config.LookPath(bin); err != nil {
					return nil, nil, fmt.Errorf("runtime_path %q: %w", rc.RuntimePath, err)
				}
			}
			if sd != nil {
				sc.Options, err = shim.SystemdRuncOptions(bin, rc.RuntimeRoot)
			} else {
				sc.Options, err = shim.RuncOptions(bin, rc.RuntimeRoot)
			}
			sc.SpecVersion = shimRuntimeSpecVersion(name, bin)
		}
		if sd != nil {
			sc.Units = sd
		}
		if err != nil {
			return nil, nil, err
		}
		rt, err := shim.New(sc)
		if err != nil {
			return nil, nil, err
		}
		return rt, rt.Close, nil
	}
	rt, err := oci.New(oci.Config{
		Name:        name,
		RuntimePath: path,
		RuntimeRoot: rc.Root,
		Features:    detectFeatures(name, path),
		ConmonPath:  conmon,
		ExitDir:     filepath.Join(cfg.State, "exits", name),
		SocketDir:   filepath.Join(cfg.State, "attach"),
		// 0 leaves the package defaults.
		CreateTimeout:  time.Duration(rc.Timeout),
		CommandTimeout: time.Duration(rc.Timeout),
		SystemdCgroup:  sd != nil,
		Units:          unitStopper(sd),
	})
	if err != nil {
		return nil, nil, err
	}
	return rt, rt.Close, nil
}
