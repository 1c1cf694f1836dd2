// Package image is podbay's image store: it pulls images from registries as
// the operator configured them (registries.conf mirrors, insecure
// registries, short names, policy.json), keeps them in containers/storage,
// answers lookups by ID, tag and digest, and makes the container root
// filesystems (writable overlay layers) the sandbox and container code runs
// from.
//
// Everything on disk is containers/storage's: images, layers and containers
// under the graph root, mounts under the run root. The only podbay-owned
// directories beside them are <graph root>/tmp (downloads in flight, emptied
// at start), <graph root>/cache (containers/image's blob-info cache) and
// <graph root>/podbay-partial (interrupted layer downloads, partial.go).
//
// Overlay layers are unpacked in process on a chrooted thread (unpack.go);
// containers/storage still re-executes the daemon for its other chrooted
// work (other drivers' unpacking, layer diffs), so podbayd's main must call
// ReexecInit first.
package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	graphdriver "go.podman.io/storage/drivers"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Defaults used for the zero values of Config.
const (
	DefaultStorageRoot = "/var/lib/podbay/storage"
	DefaultRunRoot     = "/run/podbay/storage"
	DefaultDriver      = "overlay"
	// defaultPolicyPath is where containers/image looks for policy.json.
	defaultPolicyPath = "/etc/containers/policy.json"
)

// Short-name modes. ShortNameDocker is podbay's default; the other three
// are registries.conf's own and resolve through its aliases and
// unqualified-search-registries.
const (
	// ShortNameDocker resolves an unqualified name the way kubelet,
	// containerd and docker do: "busybox" is docker.io/library/busybox.
	ShortNameDocker = "docker"
	// ShortNameDisabled tries registries.conf's aliases, then each of its
	// unqualified-search-registries in order.
	ShortNameDisabled = "disabled"
	// ShortNamePermissive behaves as ShortNameDisabled here: podbay never
	// has a terminal to prompt on.
	ShortNamePermissive = "permissive"
	// ShortNameEnforcing refuses a short name that matches no alias and more
	// than one search registry.
	ShortNameEnforcing = "enforcing"
)

// Config configures a Store. The zero value works: overlay storage under
// /var/lib/podbay/storage, registries.conf from its usual places, docker.io
// for unqualified names.
type Config struct {
	// StorageRoot is containers/storage's graph root.
	StorageRoot string
	// RunRoot is containers/storage's run root (mount state; tmpfs is fine).
	RunRoot string
	// Driver is the graph driver: "overlay" (default) or "vfs" (slow, for
	// tests and for filesystems overlay cannot sit on).
	Driver string
	// DriverOptions are containers/storage driver options such as
	// "overlay.mountopt=nodev". With overlay and no mountopt given,
	// "overlay.mountopt=nodev" is used.
	DriverOptions []string
	// RegistriesConf is the registries.conf path; empty means
	// containers/image's default lookup (/etc/containers/registries.conf
	// and registries.conf.d).
	RegistriesConf string
	// RegistriesConfDir is the registries.conf.d directory; empty means
	// the default.
	RegistriesConfDir string
	// PolicyPath is the signature policy (policy.json). Empty or missing
	// means accept any image, which is logged once as a warning.
	PolicyPath string
	// PolicyDir holds per-namespace policies (<namespace>.json, CRI-O's
	// signature_policy_dir); a pod's namespace without a file there, or
	// a pull without a pod, uses PolicyPath. Empty: none.
	PolicyDir string
	// ShortNameMode is one of the ShortName* constants; empty is
	// ShortNameDocker.
	ShortNameMode string
	// PinnedImages are references whose images are reported Pinned, so
	// that kubelet's image garbage collection leaves them alone.
	PinnedImages []string
	// Metrics, if set, receives the pull collectors.
	Metrics prometheus.Registerer
	// PullProgressTimeout cancels a pull that received no data from the
	// registry for this long (DefaultPullProgressTimeout); see
	// stallWatchdog for what counts.
	PullProgressTimeout time.Duration
	// MaxConcurrentDownloads is how many layers of one image a pull fetches
	// and unpacks at a time (DefaultMaxConcurrentDownloads), as
	// containerd's max_concurrent_downloads.
	MaxConcurrentDownloads int
	// SyncRootfsRecords has containers/storage fsync its records of root
	// filesystems (containers and their writable layers) on every change.
	// Without it they are volatile (see CreateRootfs).
	SyncRootfsRecords bool
	// GzipDecompressor decompresses the one-pass pull's gzip layers:
	// GzipDecompressorAuto (igzip from PATH when it works, else in
	// process; the default), GzipDecompressorBuiltin or the absolute path
	// of a program run as `PROGRAM -d -c` (gunzip.go).
	GzipDecompressor string
	// PartialMaxBytes bounds the partial layer downloads kept for resuming
	// (partial.go): DefaultPartialMaxBytes when 0; negative keeps none.
	PartialMaxBytes int64
	// PartialTTL is how long a partial layer download is kept without a
	// write (DefaultPartialTTL when 0).
	PartialTTL time.Duration
}

// Store is the image store. Its methods are safe for concurrent use.
type Store struct {
	store  storage.Store
	cfg    Config
	policy *policySource
	tmpDir string
	// cacheDir holds containers/image's blob-info cache.
	cacheDir string
	// pinned holds the references reported Pinned (SetPinned replaces
	// it); paths the registries.conf paths (SetRegistries).
	pinned  atomic.Pointer[map[string]bool]
	paths   atomic.Pointer[registryPaths]
	metrics *pullMetrics
	// progress tracks the pulls in flight (progress.go).
	progress *progressTracker
	// reserve is space held back so that a root filesystem can be removed
	// on a full disk.
	reserve *spaceReserve
	// vols are the image volumes' owners (volume.go).
	vols volumes

	// layerWriters is held shared by every operation that may create
	// c/storage layers (pulls, imports, rootfs creation) and exclusively by
	// the orphan-layer collection, which must not see a layer that a
	// concurrent operation has written but not yet tied to an image or a
	// container. The collection only ever TryLocks it.
	layerWriters sync.RWMutex
	// gcPending is set when a failed operation may have left orphan layers.
	gcPending atomic.Bool

	// stagedCommit serializes committing a staged layer with checking that
	// its ID is free (onepass.go).
	stagedCommit sync.Mutex
	// gunzip decompresses the one-pass pull's gzip layers.
	gunzip gunzipper
	// copyPull has every pull use containers/image's copy.Image (the
	// benchmarks' old path).
	copyPull bool
	// partials are the partial layer downloads kept for resuming.
	partials *partialStore
	// retryBase is the first wait before a layer's next attempt
	// (defaultLayerRetryBase when 0; tests shorten it).
	retryBase time.Duration

	// pullsDone counts shared pulls running in the background, which
	// Close cancels and waits for.
	pullsDone sync.WaitGroup
	// memRelease returns the pulls' garbage to the OS once they are quiet.
	memRelease memRelease

	mu     sync.Mutex
	closed bool                  // guarded by mu
	pulls  map[string]*pullCall  // guarded by mu
	info   map[string]*imageInfo // guarded by mu; keyed by image ID + manifest digest
}

// New opens (creating if needed) the storage under cfg's roots. It checks
// that the graph driver works there: an overlay graph root on a filesystem
// overlay cannot use is an error, never a silent fallback to vfs.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg = withDefaults(cfg)
	switch cfg.ShortNameMode {
	case ShortNameDocker, ShortNameDisabled, ShortNamePermissive, ShortNameEnforcing:
	default:
		return nil, fmt.Errorf("short-name mode %q: want one of docker, disabled, permissive, enforcing: %w",
			cfg.ShortNameMode, errdefs.ErrInvalidArgument)
	}
	pinned, err := pinnedSet(cfg.PinnedImages)
	if err != nil {
		return nil, err
	}

	if cfg.Driver == "overlay" || cfg.Driver == "overlay2" {
		// Layers a one-pass pull was staging when the daemon died
		// (onepass.go); containers/storage prunes them only at shutdown.
		if err := os.RemoveAll(filepath.Join(cfg.StorageRoot, "overlay", "staging")); err != nil {
			log.G(ctx).Warn("cannot clear staged layers", "err", err)
		}
	}
	opts := storage.StoreOptions{
		GraphRoot:          cfg.StorageRoot,
		RunRoot:            cfg.RunRoot,
		GraphDriverName:    cfg.Driver,
		GraphDriverOptions: cfg.DriverOptions,
	}
	st, err := storage.GetStore(opts)
	if err != nil {
		return nil, driverError(cfg, err)
	}
	s := &Store{
		store:    st,
		cfg:      cfg,
		policy:   &policySource{path: cfg.PolicyPath, dir: cfg.PolicyDir},
		tmpDir:   filepath.Join(st.GraphRoot(), "tmp"),
		cacheDir: filepath.Join(st.GraphRoot(), "cache"),
		reserve:  &spaceReserve{path: filepath.Join(st.GraphRoot(), "podbay-reserve"), size: reserveSize},
		pulls:    make(map[string]*pullCall),
		info:     make(map[string]*imageInfo),
		progress: newProgressTracker(nil),
	}
	if s.gunzip, err = newGunzipper(cfg.GzipDecompressor); err != nil {
		if cfg.GzipDecompressor != "" && cfg.GzipDecompressor != GzipDecompressorAuto {
			_, _ = st.Shutdown(false)
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
		log.G(ctx).Warn("gzip decompressor", "err", err)
	}
	s.pinned.Store(&pinned)
	s.paths.Store(&registryPaths{conf: cfg.RegistriesConf, dir: cfg.RegistriesConfDir})
	if cfg.Metrics != nil {
		if s.metrics, err = newPullMetrics(cfg.Metrics); err != nil {
			_, _ = st.Shutdown(false)
			return nil, err
		}
		if err := registerProgressCollector(cfg.Metrics, s.progress); err != nil {
			_, _ = st.Shutdown(false)
			return nil, err
		}
		m := s.metrics
		observeUnpack := func(d time.Duration) { m.observePhase("layer", "unpack", d) }
		layerUnpackObserver.Store(&observeUnpack)
	}
	// Downloads in flight when the daemon died are garbage: c/image keeps
	// blobs there only until the layer is committed.
	if err := os.RemoveAll(s.tmpDir); err != nil {
		log.G(ctx).Warn("cannot clear image download directory", "dir", s.tmpDir, "err", err)
	}
	if err := os.MkdirAll(s.tmpDir, 0o700); err != nil {
		_, _ = st.Shutdown(false)
		return nil, fmt.Errorf("create image download directory: %w", err)
	}
	s.partials = newPartialStore(ctx, st.GraphRoot(), max(cfg.PartialMaxBytes, 0), cfg.PartialTTL)
	s.partials.startCollector(context.WithoutCancel(ctx))
	s.policy.warnIfMissing(ctx)
	s.reserve.restore(ctx)
	// A pull or rootfs creation interrupted by a crash may have left layers
	// that no image or container references; a host crash may have lost
	// volatile records of root filesystems whose directories remain.
	if err := st.GarbageCollect(); err != nil {
		log.G(ctx).Warn("collect storage directories no record names", "err", err)
	}
	s.gcPending.Store(true)
	s.collectOrphanLayers(ctx)
	log.G(ctx).Info("image store ready", "root", st.GraphRoot(), "driver", cfg.Driver,
		"options", strings.Join(cfg.DriverOptions, ","), "unpack", unpackMode(cfg.Driver), "gzip", s.gunzip.String())
	return s, nil
}

func withDefaults(cfg Config) Config {
	if cfg.StorageRoot == "" {
		cfg.StorageRoot = DefaultStorageRoot
	}
	if cfg.RunRoot == "" {
		cfg.RunRoot = DefaultRunRoot
	}
	if cfg.Driver == "" {
		cfg.Driver = DefaultDriver
	}
	if cfg.ShortNameMode == "" {
		cfg.ShortNameMode = ShortNameDocker
	}
	if cfg.PullProgressTimeout <= 0 {
		cfg.PullProgressTimeout = DefaultPullProgressTimeout
	}
	if cfg.MaxConcurrentDownloads <= 0 {
		cfg.MaxConcurrentDownloads = DefaultMaxConcurrentDownloads
	}
	if cfg.PartialMaxBytes == 0 {
		cfg.PartialMaxBytes = DefaultPartialMaxBytes
	}
	if cfg.PartialTTL <= 0 {
		cfg.PartialTTL = DefaultPartialTTL
	}
	cfg.DriverOptions = append([]string(nil), cfg.DriverOptions...)
	if cfg.Driver == "overlay" {
		hasMountOpt := false
		for _, o := range cfg.DriverOptions {
			if strings.HasPrefix(o, "overlay.mountopt=") || strings.HasPrefix(o, "mountopt=") {
				hasMountOpt = true
			}
		}
		// nodev as CRI-O's and podman's storage.conf: a device node in an
		// image must not give a container a way to the host's devices.
		if !hasMountOpt {
			cfg.DriverOptions = append(cfg.DriverOptions, "overlay.mountopt=nodev")
		}
	}
	return cfg
}

// driverError explains a graph driver that cannot work on the graph root's
// filesystem, which containers/storage reports only as "not supported".
func driverError(cfg Config, err error) error {
	if errors.Is(err, graphdriver.ErrIncompatibleFS) || errors.Is(err, graphdriver.ErrNotSupported) ||
		errors.Is(err, graphdriver.ErrPrerequisites) {
		return fmt.Errorf("open image storage at %s: the %s driver cannot be used there: %w "+
			"(put the storage root on a filesystem that can hold %s layers, such as ext4, xfs with d_type or tmpfs, "+
			"not on overlayfs or a network filesystem; or choose the vfs driver): %w",
			cfg.StorageRoot, cfg.Driver, err, cfg.Driver, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("open image storage at %s (driver %s): %w", cfg.StorageRoot, cfg.Driver, err)
}

// Close cancels pulls in flight, waits for them to clean up, and releases
// the storage. Mounted container root filesystems stay mounted (running
// containers keep running across a daemon restart), so a still-mounted
// layer is not an error here.
func (s *Store) Close() error {
	s.stopPulls()
	s.memRelease.stop()
	if _, err := s.store.Shutdown(false); err != nil && !errors.Is(err, storage.ErrLayerUsedByContainer) {
		return fmt.Errorf("shut down image storage: %w", err)
	}
	return nil
}

// stopPulls refuses new pulls, cancels those in flight and waits until
// they have cleaned up.
func (s *Store) stopPulls() {
	s.partials.stopCollector()
	s.mu.Lock()
	s.closed = true
	for _, call := range s.pulls {
		call.cancel()
	}
	s.mu.Unlock()
	s.pullsDone.Wait()
}

// systemContext is the containers/image context for one pull; auth may be
// nil.
func (s *Store) systemContext(auth *Auth) (*types.SystemContext, error) {
	paths := s.registryPaths()
	sys := &types.SystemContext{
		SystemRegistriesConfPath:    paths.conf,
		SystemRegistriesConfDirPath: paths.dir,
		BigFilesTemporaryDir:        s.tmpDir,
		BlobInfoCacheDir:            s.cacheDir,
		DockerRegistryUserAgent:     "podbay",
		// Insecure registries and plain HTTP follow registries.conf's
		// per-registry insecure flag (DockerInsecureSkipTLSVerify left
		// undefined), as with CRI-O and podman.
	}
	if auth != nil {
		cred, err := auth.dockerAuth()
		if err != nil {
			return nil, err
		}
		sys.DockerAuthConfig = cred
		sys.DockerBearerRegistryToken = auth.RegistryToken
	}
	return sys, nil
}

// lookupContext is the system context for resolving short names locally.
func (s *Store) lookupContext() *types.SystemContext {
	paths := s.registryPaths()
	return &types.SystemContext{
		SystemRegistriesConfPath:    paths.conf,
		SystemRegistriesConfDirPath: paths.dir,
	}
}
