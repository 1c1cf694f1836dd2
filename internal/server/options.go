package server

import (
	"context"
	"net"

	"go.opentelemetry.io/otel/trace"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/failpoint"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/nri"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/specgen"
	"github.com/podbay/podbay/internal/store"
	"github.com/podbay/podbay/internal/systemd"
)

// The server's dependencies: the narrow interfaces it reaches the host
// through (docs/design.md, "Package layout and dependency direction") and
// the Options cmd/podbayd fills them in with.

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
