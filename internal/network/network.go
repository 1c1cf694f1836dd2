// Package network is podbay's pod-network manager. It configures a pod's
// network namespace through CNI, calling libcni directly: one ADD of the
// default network (the first usable config in the config directory) with the
// pod's interface, and the matching DEL on teardown; the pod's "lo" it
// brings up itself.
//
// The package does not create or own network namespaces: the caller pins one
// and passes its path. It does not know about CRI types either: requests come
// in as plain structs (Attachment) and results go out as Settings, the
// persisted, inspect-visible network settings.
package network

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/podbay/podbay/internal/errdefs"
)

// Defaults used for the zero values of Config's fields.
const (
	DefaultConfDir       = "/etc/cni/net.d"
	DefaultCacheDir      = "/var/lib/podbay/cni"
	DefaultIfName        = "eth0"
	DefaultNetworkName   = "podbay"
	DefaultBridgeName    = "podbay0"
	DefaultNetworkSubnet = "10.88.0.0/16"
)

// defaultPluginDirs are searched for plugin binaries when Config.PluginDirs
// is empty: Debian's containernetworking-plugins package, then the upstream
// location.
func defaultPluginDirs() []string { return []string{"/usr/lib/cni", "/opt/cni/bin"} }

// Config configures a Manager. Every field is optional; the zero value means
// the default named next to it.
type Config struct {
	// ConfDir holds the CNI network configs (DefaultConfDir).
	ConfDir string
	// PluginDirs are searched, in order, for plugin binaries (/usr/lib/cni,
	// then /opt/cni/bin).
	PluginDirs []string
	// CacheDir is libcni's cache of ADD results and configs. It must be
	// private to podbay: Cached reports every attachment found there
	// (DefaultCacheDir).
	CacheDir string
	// IfName is the pod's interface name (DefaultIfName).
	IfName string

	// WriteDefault makes New write a default bridge network to
	// ConfDir/10-podbay.conflist when no file in ConfDir loads as a network
	// config. See DefaultConfList for its content.
	WriteDefault bool
	// DefaultName is the default network's name (DefaultNetworkName).
	DefaultName string
	// DefaultBridge is the default network's bridge (DefaultBridgeName).
	DefaultBridge string
	// DefaultSubnet is the default network's pod range, one CIDR or an IPv4
	// and an IPv6 CIDR separated by a comma (DefaultNetworkSubnet).
	DefaultSubnet string
	// DefaultDataDir is host-local's dataDir in the default network; empty
	// leaves the plugin's default, /var/lib/cni/networks.
	DefaultDataDir string

	// PluginTimeout bounds each plugin invocation (ADD, DEL, CHECK, STATUS,
	// VERSION) of every network; a plugin still running then is killed and
	// the call fails with a *PluginTimeoutError (DefaultPluginTimeout).
	PluginTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.ConfDir == "" {
		c.ConfDir = DefaultConfDir
	}
	if len(c.PluginDirs) == 0 {
		c.PluginDirs = defaultPluginDirs()
	} else {
		c.PluginDirs = append([]string(nil), c.PluginDirs...)
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.IfName == "" {
		c.IfName = DefaultIfName
	}
	if c.DefaultName == "" {
		c.DefaultName = DefaultNetworkName
	}
	if c.DefaultBridge == "" {
		c.DefaultBridge = DefaultBridgeName
	}
	if c.DefaultSubnet == "" {
		c.DefaultSubnet = DefaultNetworkSubnet
	}
	if c.PluginTimeout <= 0 {
		c.PluginTimeout = DefaultPluginTimeout
	}
	return c
}

// Manager sets up and tears down pod networks. Its methods are safe for
// concurrent use. Calls for different attachment IDs run in parallel; the
// caller serializes Setup and Teardown of the same ID (the sandbox's own
// lock does that in the server).
type Manager struct {
	cfg  Config
	cni  *libcni.CNIConfig
	exec invoke.Exec

	// loaded is the last parsed view of ConfDir. It is replaced, never
	// mutated, so readers need no lock.
	loaded atomic.Pointer[confSnapshot]
	// reloadMu serializes reloads of ConfDir, so that 20 concurrent Setups
	// after a config change parse and validate it once. It is held across
	// the reload's I/O on purpose; the hot path, an unchanged directory,
	// does not take it.
	reloadMu sync.Mutex
	// writeMu serializes writes of the default conflist.
	writeMu sync.Mutex
	// pendingCIDR is a pod CIDR change UpdatePodCIDR deferred while pods
	// of the old range were attached; guarded by writeMu.
	pendingCIDR string

	masqMu sync.Mutex
	// masqNets are the networks whose masquerade this Manager installed.
	masqNets map[string]bool // guarded by masqMu

	// loopbackUp brings "lo" up in a pod's namespace (loopback.go); unit
	// tests, whose namespaces are not real, record the call instead.
	loopbackUp func(netns string) error
}

// reloadTimeout bounds the plugin VERSION calls of a config reload that New
// triggers without a caller's context.
const reloadTimeout = 30 * time.Second

// New returns a Manager for cfg. With cfg.WriteDefault it writes the default
// conflist when ConfDir has no loadable config. It does not fail when no
// usable config exists: Status reports that, and Setup fails with an error
// classified as errdefs.ErrFailedPrecondition until one appears.
func New(cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := validateIfName(cfg.IfName); err != nil {
		return nil, fmt.Errorf("network config: interface name %q: %w", cfg.IfName, err)
	}
	if _, err := parseSubnets(cfg.DefaultSubnet); err != nil {
		return nil, fmt.Errorf("network config: default subnet: %w", err)
	}
	// An explicit exec: libcni's default has no timeout of its own (and
	// would be created lazily on first use, a data race between concurrent
	// Setups).
	exec := &pluginExec{timeout: cfg.PluginTimeout, stderr: os.Stderr}
	m := &Manager{
		cfg:        cfg,
		exec:       exec,
		cni:        libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, cfg.CacheDir, exec),
		loopbackUp: loopbackUp,
	}
	if cfg.WriteDefault {
		ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
		defer cancel()
		if err := m.ensureDefault(ctx); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Status returns nil when a network config in ConfDir loads and the plugins
// it names exist and support its version. Otherwise
// the error's message is the reason, fit to show as NetworkReady=false in CRI
// Status; it is classified as errdefs.ErrFailedPrecondition.
//
// For configs of CNI version 1.1.0 and later it also runs the plugins' STATUS
// command, whose failure is likewise returned.
func (m *Manager) Status(ctx context.Context) error {
	snap, err := m.config(ctx)
	if err != nil {
		return err
	}
	if err := m.cni.GetStatusNetworkList(ctx, snap.selected.list); err != nil {
		return fmt.Errorf("%w: network %q (%s) status: %w",
			errdefs.ErrFailedPrecondition, snap.selected.list.Name, snap.selected.file, err)
	}
	return nil
}

// NoConfigError reports that ConfDir holds no usable network config. It is
// classified as errdefs.ErrFailedPrecondition.
type NoConfigError struct {
	Dir string
	// Skipped lists the candidate files and why each was not usable, in the
	// order they were considered.
	Skipped []SkippedConfig
}

// SkippedConfig is a config file that was not used, and why.
type SkippedConfig struct {
	File   string
	Reason string
}

func (e *NoConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no usable cni network config in %s", e.Dir)
	for i, s := range e.Skipped {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s: %s", sep, s.File, s.Reason)
	}
	return b.String()
}

// Unwrap classifies the error.
func (e *NoConfigError) Unwrap() error { return errdefs.ErrFailedPrecondition }
