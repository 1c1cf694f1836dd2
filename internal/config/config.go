// Package config holds podbayd's configuration: a TOML file whose every key
// is optional, with defaults that work on a fresh Debian machine, and flags
// that override it.
package config

import (
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/quantity"
)

// DefaultPath is where podbayd looks for its configuration file.
const DefaultPath = "/etc/podbay/podbay.toml"

// Network order values.
const (
	// OrderBefore sets up the pod network before the sandbox container is
	// created, so that a VM runtime finds the interfaces when it boots.
	OrderBefore = "before"
	// OrderAfter starts the sandbox container first and configures the
	// network afterwards.
	OrderAfter = "after"
)

// Values of sandbox_process.
const (
	// SandboxProcessAuto: no sandbox process for an oci handler's pod
	// that needs none (see Config.SandboxProcess).
	SandboxProcessAuto = "auto"
	// SandboxProcessAlways: the pause container for every oci pod.
	SandboxProcessAlways = "always"
)

// Config is podbayd's configuration. The zero value is not usable; start from
// Default.
type Config struct {
	// Listen is the unix socket the CRI services are served on.
	Listen string `toml:"listen"`
	// Root holds persistent state: the database, sandbox directories, the
	// pause root filesystem, the CNI cache.
	Root string `toml:"root"`
	// State holds runtime state that must not survive a reboot: runtime
	// roots, exit files, attach sockets.
	State string `toml:"state"`
	// NetNSDir is where sandbox network namespaces are pinned, as
	// <NetNSDir>/podbay-<id>.
	NetNSDir string `toml:"netns_dir"`
	// LogLevel is one of debug, info, warn, error.
	LogLevel string `toml:"log_level"`
	// LogFormat is text or json.
	LogFormat string `toml:"log_format"`
	// MetricsAddress is the host:port of the Prometheus endpoint; empty
	// disables it.
	MetricsAddress string `toml:"metrics_address"`
	// DebugPprof serves Go's runtime profiles under /debug/pprof/ on the
	// metrics endpoint; off by default.
	DebugPprof bool `toml:"debug_pprof"`
	// StatsCollectPeriod is how often every container's and pod's
	// statistics are sampled in the background for ListContainerStats and
	// ListPodSandboxStats, which then answer from the last sample (as
	// cAdvisor's housekeeping and containerd's stats_collect_period do);
	// 0 reads every cgroup on each call.
	StatsCollectPeriod Duration `toml:"stats_collect_period"`
	// CgroupDriver is "systemd", "cgroupfs" or "auto" (systemd when PID 1
	// is systemd); Validate resolves auto. It is reported to the kubelet.
	CgroupDriver string `toml:"cgroup_driver"`
	// DefaultCgroupParent is used when a pod names no cgroup parent: a
	// cgroupfs path, or under systemd a slice (the cgroupfs default
	// /podbay becomes podbay.slice there).
	DefaultCgroupParent string `toml:"default_cgroup_parent"`
	// MonitorSlice is, under the systemd driver, the slice of the scopes
	// conmon and the shims run in (podbay-conmon-<id>.scope,
	// podbay-shim-<pod>.scope), as CRI-O's conmon_cgroup.
	MonitorSlice string `toml:"monitor_slice"`
	// RestrictOOMScoreAdj clamps requested oom_score_adj values to no lower
	// than the daemon's own: "auto" (when the daemon lacks CAP_SYS_RESOURCE),
	// "true" or "false".
	RestrictOOMScoreAdj string `toml:"restrict_oom_score_adj"`
	// SandboxProcess says when an oci handler's pod gets a sandbox
	// process (the pause container): "auto" (the default) runs none for a
	// pod that does not share its PID namespace and has no user namespace
	// of its own (podbayd pins the pod's IPC and UTS namespaces itself and
	// containers join them by path, as CRI-O's drop_infra_ctr); "always"
	// runs the pause container for every pod. Decided per pod at
	// RunPodSandbox: a reload changes new pods only.
	SandboxProcess string `toml:"sandbox_process"`
	// ShmSize is the size of the /dev/shm tmpfs a pod with its own IPC
	// namespace shares among its containers on an oci handler, as a
	// Kubernetes quantity ("64Mi", containerd's and CRI-O's size) from 1Mi
	// to 1Ti, rounded up to whole KiB. A reload changes new pods only. See
	// ShmSizeBytes.
	ShmSize string `toml:"shm_size"`
	// PauseImage is the image of every sandbox container. When it is the
	// default and cannot be pulled, podbayd makes it from PauseBinary.
	PauseImage string `toml:"pause_image"`
	// Conmon is the path of the conmon binary.
	Conmon string `toml:"conmon"`
	// PauseBinary is the static pause program the built-in pause image is
	// made from. Empty: podbay-pause beside podbayd, then PATH.
	PauseBinary string `toml:"pause_binary"`
	// DefaultRuntime is the handler used when a pod names none.
	DefaultRuntime string `toml:"default_runtime"`
	// SandboxTimeout bounds the work of a RunPodSandbox or CreateContainer
	// once its client has gone, as a Go duration.
	SandboxTimeout Duration `toml:"sandbox_timeout"`
	// StreamAddress is the IP address the streaming server (the sessions
	// of Exec, Attach and PortForward) listens on, and names in the URLs
	// it hands out; as containerd's stream_server_address.
	StreamAddress string `toml:"stream_address"`
	// StreamPort is the streaming server's TCP port; 0 picks a free one.
	StreamPort int `toml:"stream_port"`
	// StreamIdleTimeout closes a streaming session that passed no data
	// for this long.
	StreamIdleTimeout Duration `toml:"stream_idle_timeout"`
	// StreamTLSCert and StreamTLSKey, PEM files, make the streaming
	// server serve HTTPS (its URLs are https); StreamTLSCA, a PEM bundle,
	// then also requires client certificates signed by one of its CAs.
	// Empty: plain HTTP.
	StreamTLSCert string `toml:"stream_tls_cert"`
	StreamTLSKey  string `toml:"stream_tls_key"`
	StreamTLSCA   string `toml:"stream_tls_ca"`
	// CDISpecDirs are the CDI spec directories, later ones taking
	// precedence; empty disables CDI devices.
	CDISpecDirs []string `toml:"cdi_spec_dirs"`
	// HooksDir are the OCI hook directories (oci-hooks(5)), a file in a
	// later one masking a same-named file of an earlier one; empty: none.
	HooksDir []string `toml:"hooks_dir"`

	Network  Network            `toml:"network"`
	Image    Image              `toml:"image"`
	NRI      NRI                `toml:"nri"`
	Runtimes map[string]Runtime `toml:"runtimes"`
	Tracing  Tracing            `toml:"tracing"`
}

// NRI configures the Node Resource Interface (github.com/containerd/nri):
// plugins that see pod and container events and adjust containers. The
// keys and defaults are containerd's and CRI-O's.
type NRI struct {
	// Enable runs NRI; disabled, no socket is made and no plugin started.
	Enable bool `toml:"enable"`
	// SocketPath is where external plugins connect.
	SocketPath string `toml:"socket_path"`
	// PluginPath holds the pre-registered plugins podbayd starts
	// (executables named <index>-<name>).
	PluginPath string `toml:"plugin_path"`
	// PluginConfigPath holds their configuration (<name>.conf or
	// <index>-<name>.conf).
	PluginConfigPath string `toml:"plugin_config_path"`
	// PluginRegistrationTimeout bounds a plugin's registration;
	// PluginRequestTimeout each event sent to a plugin.
	PluginRegistrationTimeout Duration `toml:"plugin_registration_timeout"`
	PluginRequestTimeout      Duration `toml:"plugin_request_timeout"`
	// DisableConnections refuses external plugins: only pre-registered
	// ones run, and no socket is made.
	DisableConnections bool `toml:"disable_connections"`
	// DefaultValidator is NRI's built-in validator: which adjustments
	// plugins may not make, and which plugins must have seen a container
	// before it is created. The keys are containerd's.
	DefaultValidator NRIValidator `toml:"default_validator"`
}

// NRIValidator configures NRI's default validator
// (github.com/containerd/nri/plugins/default-validator), as containerd's
// [plugins."io.containerd.nri.v1.nri".default_validator]: a container
// whose plugins' combined adjustment breaks a rule is not created.
type NRIValidator struct {
	// Enable runs the validator; off by default, as in containerd.
	Enable bool `toml:"enable"`
	// Reject* refuse an adjustment of the kind named: OCI hooks, a
	// RuntimeDefault, Unconfined or Localhost seccomp profile, the
	// container's Linux namespaces, its sysctls.
	RejectOCIHookAdjustment               bool `toml:"reject_oci_hook_adjustment"`
	RejectRuntimeDefaultSeccompAdjustment bool `toml:"reject_runtime_default_seccomp_adjustment"`
	RejectUnconfinedSeccompAdjustment     bool `toml:"reject_unconfined_seccomp_adjustment"`
	RejectCustomSeccompAdjustment         bool `toml:"reject_custom_seccomp_adjustment"`
	RejectNamespaceAdjustment             bool `toml:"reject_namespace_adjustment"`
	RejectSysctlAdjustment                bool `toml:"reject_sysctl_adjustment"`
	// RequiredPlugins must each have handled a container's creation, or
	// it is refused; a container whose annotation
	// TolerateMissingPluginsAnnotation (when set) says "true" is spared.
	RequiredPlugins                  []string `toml:"required_plugins"`
	TolerateMissingPluginsAnnotation string   `toml:"tolerate_missing_plugins_annotation"`
}

// DefaultPauseImage is the pause image podbayd can make itself.
const DefaultPauseImage = "registry.k8s.io/pause:3.10"

// Image configures the image store (containers/storage and
// containers/image).
type Image struct {
	// StorageRoot and RunRoot are containers/storage's graph and run roots.
	// Default <root>/storage and <state>/storage.
	StorageRoot string `toml:"storage_root"`
	RunRoot     string `toml:"run_root"`
	// Driver is the storage driver: overlay (default) or vfs.
	Driver        string   `toml:"driver"`
	DriverOptions []string `toml:"driver_options"`
	// RegistriesConf is the registries.conf with mirrors, insecure
	// registries and short-name aliases; empty means containers/image's
	// default (/etc/containers/registries.conf and registries.conf.d).
	RegistriesConf    string `toml:"registries_conf"`
	RegistriesConfDir string `toml:"registries_conf_dir"`
	// SignaturePolicy is the policy.json; when the file is missing every
	// image is accepted (and a warning logged).
	SignaturePolicy string `toml:"signature_policy"`
	// SignaturePolicyDir holds per-namespace policies, as CRI-O's
	// signature_policy_dir: a pull for a pod of namespace N must satisfy
	// <dir>/N.json when that file exists, else SignaturePolicy. Empty:
	// none.
	SignaturePolicyDir string `toml:"signature_policy_dir"`
	// PullProgressTimeout cancels a pull that received no bytes for this
	// long (a registry that stalls mid-blob); as containerd's
	// image_pull_progress_timeout, with its default, 5m.
	PullProgressTimeout Duration `toml:"pull_progress_timeout"`
	// MaxConcurrentDownloads is how many layers of one image a pull
	// fetches and unpacks at a time; as containerd's
	// max_concurrent_downloads, with its default, 3.
	MaxConcurrentDownloads int `toml:"max_concurrent_downloads"`
	// GzipDecompressor inflates gzip layers: "auto" (the default: igzip,
	// ISA-L's, from PATH when it works, as containerd uses it; else in
	// process), "builtin" (in process) or the absolute path of a program
	// run as `PROGRAM -d -c` (igzip, unpigz, gzip) as the user nobody.
	GzipDecompressor string `toml:"gzip_decompressor"`
	// SyncRootfsRecords has containers/storage fsync its records of the
	// containers' root filesystems on every create and remove. Default
	// false: they are written without fsync (volatile), which survives a
	// daemon crash but may lose the last changes with a host crash.
	SyncRootfsRecords bool `toml:"sync_rootfs_records"`
	// PartialMaxBytes bounds the bytes of interrupted layer downloads kept
	// under the storage root for the next pull to resume (the oldest are
	// dropped first); 0 keeps none. Default 10 GiB.
	PartialMaxBytes int64 `toml:"partial_max_bytes"`
	// PartialTTL is how long an interrupted layer download is kept without
	// being resumed. Default 24h.
	PartialTTL Duration `toml:"partial_ttl"`
}

// Network configures CNI.
type Network struct {
	ConfDir    string   `toml:"conf_dir"`
	PluginDirs []string `toml:"plugin_dirs"`
	CacheDir   string   `toml:"cache_dir"`
	// WriteDefault writes a bridge conflist into ConfDir when it holds no
	// network configuration.
	WriteDefault  bool   `toml:"write_default_config"`
	DefaultName   string `toml:"default_network_name"`
	DefaultBridge string `toml:"default_bridge"`
	DefaultSubnet string `toml:"default_subnet"`
	// PluginTimeout bounds each CNI plugin invocation (ADD, DEL, CHECK,
	// STATUS, VERSION); a plugin still running then is killed and the call
	// fails. Default 1m: far above a working plugin's milliseconds to
	// seconds, and short enough that a hung ADD and the DEL that undoes it
	// end within sandbox_timeout.
	PluginTimeout Duration `toml:"plugin_timeout"`
}

// Runtime handler types.
const (
	// TypeOCI is an OCI runtime binary (runc, crun, or a wrapper with their
	// command line), each container monitored by conmon.
	TypeOCI = "oci"
	// TypeVM is a containerd shim v2 binary (containerd-shim-kata-v2, or
	// containerd-shim-runc-v2 as a stand-in), one shim per pod, driven over
	// ttrpc.
	TypeVM = "vm"
)

// Runtime is one runtime handler.
type Runtime struct {
	// Type is "oci" (the default) or "vm".
	Type string `toml:"type"`
	// Path is the runtime binary: for oci, runc, crun or a wrapper; for vm,
	// the shim v2 binary (containerd-shim-kata-v2). A bare name is looked
	// up in PATH.
	Path string `toml:"path"`
	// Root is the handler's state directory: for oci, passed to the
	// runtime as --root; for vm, where podbay keeps each pod's shim
	// address, the containers' stdio FIFOs and exit files, and the shims'
	// event socket. Default <state>/runtimes/<name>.
	Root string `toml:"root"`
	// NetworkOrder is this handler's default: "before" or "after".
	NetworkOrder string `toml:"network_order"`
	// PodAnnotations and ContainerAnnotations are the pod and container
	// annotations passed through into the OCI spec the runtime sees, as
	// path.Match patterns ("example.com/*"; "*" crosses "/"). Default
	// none, for every handler type, as containerd and CRI-O: runtimes act
	// on annotations (runc on org.systemd.property.*, Kata on
	// io.katacontainers.*), so the operator chooses which a pod may set.
	// Keys in a reserved namespace never pass (annotations.Reserved), and
	// those in an opt-in namespace (io.katacontainers., dev.gvisor., ...)
	// only through a pattern that names it; the io.kubernetes.cri.*
	// annotations podbay sets itself are always there.
	PodAnnotations       []string `toml:"pod_annotations"`
	ContainerAnnotations []string `toml:"container_annotations"`
	// RuntimePath and RuntimeRoot are, for a vm handler running
	// containerd-shim-runc-v2, the runc binary and runc root the shim is
	// told to use (containerd's runc options BinaryName and Root).
	RuntimePath string `toml:"runtime_path"`
	RuntimeRoot string `toml:"runtime_root"`
	// ConfigPath is, for a vm handler running Kata, the runtime's own
	// configuration file (containerd's runtime options ConfigPath, e.g.
	// /etc/kata-containers/configuration.toml).
	ConfigPath string `toml:"config_path"`
	// OptionsType is, with config_path, the type URL of the file's
	// content, sent in the same options (containerd's runtime option
	// TypeUrl): gVisor's containerd-shim-runsc-v1 takes
	// "io.containerd.runsc.v1.options" and config_path a runsc.toml.
	OptionsType string `toml:"options_type"`
	// RequiresNetworkBeforeStart says the handler's runtime reads the
	// pod's interfaces when it boots (gVisor's netstack, a Kata VM): a
	// pod that asks for network order "after" is refused with
	// FailedPrecondition, unless AllowNetworkAfter is set, which runs it
	// with a warning logged (the sandbox then has no pod interface).
	RequiresNetworkBeforeStart bool `toml:"requires_network_before_start"`
	AllowNetworkAfter          bool `toml:"allow_network_after"`
	// Timeout bounds each call to the runtime: a create (conmon and the
	// runtime's create, or the shim's start and Create) and each start,
	// kill, delete and state. A call still running then fails, its
	// processes are killed and a create is undone. Per handler, because a
	// VM runtime boots a guest and may need far longer than runc. 0 (the
	// default) means 2m for a create and 1m for the other calls.
	Timeout Duration `toml:"timeout"`
}

// Default returns the configuration used when no file and no flag says
// otherwise.
func Default() *Config {
	return &Config{
		Listen:              "/run/podbay/podbay.sock",
		Root:                "/var/lib/podbay",
		State:               "/run/podbay",
		NetNSDir:            "/var/run/netns",
		LogLevel:            "info",
		LogFormat:           "text",
		CgroupDriver:        "auto",
		DefaultCgroupParent: "/podbay",
		MonitorSlice:        "system.slice",
		RestrictOOMScoreAdj: "auto",
		SandboxProcess:      SandboxProcessAuto,
		ShmSize:             DefaultShmSize,
		Conmon:              "conmon",
		PauseImage:          DefaultPauseImage,
		DefaultRuntime:      "runc",
		SandboxTimeout:      Duration(4 * 60e9),
		StreamAddress:       "127.0.0.1",
		StreamIdleTimeout:   Duration(4 * 3600e9),
		StatsCollectPeriod:  Duration(10 * time.Second),
		CDISpecDirs:         []string{"/etc/cdi", "/var/run/cdi"},
		HooksDir:            []string{"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"},
		Network: Network{
			ConfDir:       "/etc/cni/net.d",
			PluginDirs:    []string{"/usr/lib/cni", "/opt/cni/bin"},
			WriteDefault:  true,
			DefaultName:   "podbay",
			DefaultBridge: "podbay0",
			DefaultSubnet: "10.88.0.0/16",
			PluginTimeout: Duration(time.Minute),
		},
		Image: Image{
			Driver:                 "overlay",
			SignaturePolicy:        "/etc/containers/policy.json",
			PullProgressTimeout:    Duration(5 * time.Minute),
			MaxConcurrentDownloads: 3,
			GzipDecompressor:       "auto",
			PartialMaxBytes:        10 << 30,
			PartialTTL:             Duration(24 * time.Hour),
		},
		NRI: NRI{
			Enable:                    true,
			SocketPath:                "/var/run/nri/nri.sock",
			PluginPath:                "/opt/nri/plugins",
			PluginConfigPath:          "/etc/nri/conf.d",
			PluginRegistrationTimeout: Duration(5 * time.Second),
			PluginRequestTimeout:      Duration(2 * time.Second),
			DefaultValidator:          NRIValidator{RequiredPlugins: []string{}},
		},
		Runtimes: map[string]Runtime{
			"runc": {Path: "runc"},
			"crun": {Path: "crun"},
		},
		Tracing: defaultTracing(),
	}
}

// Load reads path over the defaults. A missing file is not an error when
// optional is true (the default path); a file named explicitly must exist.
// Image configuration paths the file does not set come from the
// environment where the containers tools' conventions say so (env.go).
func Load(path string, optional bool) (*Config, error) {
	cfg := Default()
	data, err := os.ReadFile(path)
	if err != nil {
		if optional && errors.Is(err, os.ErrNotExist) {
			applyEnv(cfg, func(string) bool { return false }, os.LookupEnv)
			return cfg, nil
		}
		return nil, fmt.Errorf("read config: %w", err)
	}
	// Runtimes named in the file replace the built-in ones, so that an
	// operator's [runtimes] table is the whole list.
	var probe struct {
		Runtimes map[string]toml.Primitive `toml:"runtimes"`
	}
	md, err := toml.Decode(string(data), &probe)
	if err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	if len(probe.Runtimes) > 0 {
		cfg.Runtimes = map[string]Runtime{}
	}
	md, err = toml.Decode(string(data), cfg)
	if err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
	}
	applyEnv(cfg, func(key string) bool { return md.IsDefined("image", key) }, os.LookupEnv)
	return cfg, nil
}

// Validate fills derived defaults and checks values. It resolves binary
// names against PATH.
func (c *Config) Validate() error {
	var errs []error
	for _, p := range []struct{ name, val string }{
		{"listen", c.Listen}, {"root", c.Root}, {"state", c.State}, {"netns_dir", c.NetNSDir},
	} {
		if !filepath.IsAbs(p.val) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, got %q", p.name, p.val))
		}
	}
	if c.StatsCollectPeriod < 0 {
		errs = append(errs, fmt.Errorf("stats_collect_period must not be negative, got %v", c.StatsCollectPeriod))
	}
	if d := c.Image.SignaturePolicyDir; d != "" && !filepath.IsAbs(d) {
		errs = append(errs, fmt.Errorf("image.signature_policy_dir must be an absolute path, got %q", d))
	}
	for _, d := range c.CDISpecDirs {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("cdi_spec_dirs: %q must be an absolute path", d))
		}
	}
	for _, d := range c.HooksDir {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("hooks_dir: %q must be an absolute path", d))
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format %q: want text or json", c.LogFormat))
	}
	errs = append(errs, c.validateCgroupDriver()...)
	switch c.RestrictOOMScoreAdj {
	case "auto", "true", "false":
	default:
		errs = append(errs, fmt.Errorf("restrict_oom_score_adj %q: want auto, true or false", c.RestrictOOMScoreAdj))
	}
	switch c.SandboxProcess {
	case SandboxProcessAuto, SandboxProcessAlways:
	default:
		errs = append(errs, fmt.Errorf("sandbox_process %q: want %s or %s", c.SandboxProcess, SandboxProcessAuto, SandboxProcessAlways))
	}
	if _, err := parseShmSize(c.ShmSize); err != nil {
		errs = append(errs, err)
	}
	if c.SandboxTimeout <= 0 {
		errs = append(errs, fmt.Errorf("sandbox_timeout must be positive"))
	}
	errs = append(errs, c.validateStream()...)
	if c.Network.PluginTimeout <= 0 {
		errs = append(errs, fmt.Errorf("network.plugin_timeout must be positive"))
	}
	errs = append(errs, c.validateImage()...)
	errs = append(errs, c.Tracing.validate()...)
	if c.NRI.Enable {
		errs = append(errs, c.NRI.validate()...)
	}
	if c.PauseImage == "" {
		errs = append(errs, fmt.Errorf("pause_image must not be empty"))
	}
	if len(c.Runtimes) == 0 {
		errs = append(errs, fmt.Errorf("no runtimes configured"))
	}
	if _, ok := c.Runtimes[c.DefaultRuntime]; !ok {
		errs = append(errs, fmt.Errorf("default_runtime %q is not in [runtimes]", c.DefaultRuntime))
	}
	for _, name := range c.RuntimeNames() {
		rt, rtErrs := c.validateRuntime(name, c.Runtimes[name])
		errs = append(errs, rtErrs...)
		c.Runtimes[name] = rt
	}
	return errors.Join(errs...)
}

// validateStream checks the streaming server's keys.
func (c *Config) validateStream() []error {
	var errs []error
	if ip := net.ParseIP(c.StreamAddress); ip == nil || ip.IsUnspecified() {
		// The address goes into the URLs the clients connect to.
		errs = append(errs, fmt.Errorf("stream_address %q: want the IP address clients connect to (not 0.0.0.0 or ::)", c.StreamAddress))
	}
	if c.StreamPort < 0 || c.StreamPort > 65535 {
		errs = append(errs, fmt.Errorf("stream_port %d: want 0 (any free port) to 65535", c.StreamPort))
	}
	if c.StreamIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("stream_idle_timeout must be positive"))
	}
	if (c.StreamTLSCert == "") != (c.StreamTLSKey == "") || (c.StreamTLSCA != "" && c.StreamTLSCert == "") {
		errs = append(errs, fmt.Errorf("stream_tls_cert and stream_tls_key go together, and stream_tls_ca needs them"))
	}
	return errs
}

// validateImage checks the image keys and fills in the storage's (and
// the CNI cache's) directories under root and state where they are unset.
func (c *Config) validateImage() []error {
	var errs []error
	if c.Image.PullProgressTimeout <= 0 {
		errs = append(errs, fmt.Errorf("image.pull_progress_timeout must be positive"))
	}
	if c.Image.MaxConcurrentDownloads < 1 || c.Image.MaxConcurrentDownloads > 64 {
		errs = append(errs, fmt.Errorf("image.max_concurrent_downloads must be between 1 and 64, not %d", c.Image.MaxConcurrentDownloads))
	}
	if c.Image.PartialMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("image.partial_max_bytes must be 0 (keep no partial download) or more, not %d", c.Image.PartialMaxBytes))
	}
	if c.Image.PartialTTL <= 0 {
		errs = append(errs, fmt.Errorf("image.partial_ttl must be positive"))
	}
	switch g := c.Image.GzipDecompressor; {
	case g == "auto" || g == "builtin" || filepath.IsAbs(g):
	default:
		errs = append(errs, fmt.Errorf("image.gzip_decompressor must be auto, builtin or an absolute path, not %q", g))
	}
	if c.Network.CacheDir == "" {
		c.Network.CacheDir = filepath.Join(c.Root, "cni")
	}
	if c.Image.StorageRoot == "" {
		c.Image.StorageRoot = filepath.Join(c.Root, "storage")
	}
	if c.Image.RunRoot == "" {
		c.Image.RunRoot = filepath.Join(c.State, "storage")
	}
	switch c.Image.Driver {
	case "overlay", "vfs":
	default:
		errs = append(errs, fmt.Errorf("image.driver %q: want overlay or vfs", c.Image.Driver))
	}
	return errs
}

// validateRuntime checks handler name's rt and returns it with its
// defaults filled in.
func (c *Config) validateRuntime(name string, rt Runtime) (Runtime, []error) {
	var errs []error
	if rt.Root == "" {
		rt.Root = filepath.Join(c.State, "runtimes", name)
	}
	switch rt.Type {
	case "":
		rt.Type = TypeOCI
	case TypeOCI, TypeVM:
	default:
		errs = append(errs, fmt.Errorf("runtimes.%s.type %q: want oci or vm", name, rt.Type))
	}
	if rt.Type == TypeOCI && (rt.RuntimePath != "" || rt.RuntimeRoot != "" || rt.ConfigPath != "") {
		errs = append(errs, fmt.Errorf("runtimes.%s: runtime_path, runtime_root and config_path are for vm handlers", name))
	}
	if rt.OptionsType != "" && rt.ConfigPath == "" {
		errs = append(errs, fmt.Errorf("runtimes.%s: options_type needs config_path", name))
	}
	if rt.ConfigPath != "" && (rt.RuntimePath != "" || rt.RuntimeRoot != "") {
		errs = append(errs, fmt.Errorf("runtimes.%s: config_path (Kata's options) and runtime_path/runtime_root (runc's options) exclude each other", name))
	}
	for _, p := range []struct{ key, val string }{
		{"runtime_root", rt.RuntimeRoot}, {"config_path", rt.ConfigPath},
	} {
		if p.val != "" && !filepath.IsAbs(p.val) {
			errs = append(errs, fmt.Errorf("runtimes.%s.%s must be an absolute path, got %q", name, p.key, p.val))
		}
	}
	for _, p := range append(append([]string(nil), rt.PodAnnotations...), rt.ContainerAnnotations...) {
		if err := annotations.CheckPattern(p); err != nil {
			errs = append(errs, fmt.Errorf("runtimes.%s: annotation pattern %q: %v", name, p, err))
		} else if annotations.ReservedPattern(p) {
			errs = append(errs, fmt.Errorf("runtimes.%s: annotation pattern %q names a reserved namespace, which no pod may set (see annotations.Reserved)", name, p))
		}
	}
	if rt.Timeout < 0 {
		errs = append(errs, fmt.Errorf("runtimes.%s.timeout must not be negative", name))
	}
	switch rt.NetworkOrder {
	case "":
		rt.NetworkOrder = OrderBefore
	case OrderBefore, OrderAfter:
	default:
		errs = append(errs, fmt.Errorf("runtimes.%s.network_order %q: want before or after", name, rt.NetworkOrder))
	}
	if rt.RequiresNetworkBeforeStart && rt.NetworkOrder == OrderAfter && !rt.AllowNetworkAfter {
		errs = append(errs, fmt.Errorf("runtimes.%s: network_order \"after\" with requires_network_before_start needs allow_network_after", name))
	}
	return rt, errs
}

func (n *NRI) validate() []error {
	var errs []error
	for _, p := range []struct{ key, val string }{
		{"socket_path", n.SocketPath}, {"plugin_path", n.PluginPath}, {"plugin_config_path", n.PluginConfigPath},
	} {
		if !filepath.IsAbs(p.val) {
			errs = append(errs, fmt.Errorf("nri.%s must be an absolute path, got %q", p.key, p.val))
		}
	}
	if len(n.SocketPath) >= 108 {
		errs = append(errs, fmt.Errorf("nri.socket_path %q is longer than a unix socket path may be", n.SocketPath))
	}
	if n.PluginRegistrationTimeout <= 0 {
		errs = append(errs, fmt.Errorf("nri.plugin_registration_timeout must be positive"))
	}
	if n.PluginRequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("nri.plugin_request_timeout must be positive"))
	}
	return append(errs, n.DefaultValidator.validate()...)
}

// annotationKey is a Kubernetes annotation key: an optional DNS
// subdomain prefix and a slash, then a name.
var annotationKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

func (v *NRIValidator) validate() []error {
	var errs []error
	if !v.Enable && (len(v.RequiredPlugins) > 0 || v.TolerateMissingPluginsAnnotation != "") {
		errs = append(errs, fmt.Errorf("nri.default_validator: required_plugins and tolerate_missing_plugins_annotation need enable = true"))
	}
	for _, p := range v.RequiredPlugins {
		if p == "" || strings.ContainsAny(p, "/ \t\n") {
			errs = append(errs, fmt.Errorf("nri.default_validator.required_plugins: %q is not a plugin name", p))
		}
	}
	if a := v.TolerateMissingPluginsAnnotation; a != "" {
		if len(a) > 317 || !annotationKey.MatchString(a) {
			errs = append(errs, fmt.Errorf("nri.default_validator.tolerate_missing_plugins_annotation %q is not an annotation key ([prefix/]name)", a))
		}
	}
	return errs
}

// StreamListenAddress is the host:port the streaming server listens on.
func (c *Config) StreamListenAddress() string {
	return net.JoinHostPort(c.StreamAddress, strconv.Itoa(c.StreamPort))
}

// RuntimeNames returns the configured handler names, sorted.
func (c *Config) RuntimeNames() []string {
	names := make([]string, 0, len(c.Runtimes))
	for n := range c.Runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookPath resolves a binary name (or returns an absolute path unchanged
// after checking it exists).
func LookPath(name string) (string, error) {
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", err
		}
		return name, nil
	}
	return exec.LookPath(name)
}

// Duration is a time.Duration that reads from TOML as a string like "4m".
type Duration int64

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText formats the duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(formatDuration(int64(d))), nil }

// DefaultShmSize is shm_size's default: containerd's and CRI-O's pod
// /dev/shm size.
const DefaultShmSize = "64Mi"

// ShmSizeBytes is shm_size in bytes; the default's for a value Validate
// refuses.
func (c *Config) ShmSizeBytes() int64 {
	n, err := parseShmSize(c.ShmSize)
	if err != nil {
		n, _ = parseShmSize(DefaultShmSize)
	}
	return n
}

// parseShmSize parses shm_size: a whole number of bytes from 1Mi (smaller
// breaks programs that expect a usable /dev/shm) to 1Ti, rounded up to
// whole KiB. An empty value is the default.
func parseShmSize(s string) (int64, error) {
	if s == "" {
		s = DefaultShmSize
	}
	q, err := quantity.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("shm_size %q: %w", s, err)
	}
	const lo, hi = 1 << 20, 1 << 40
	if !q.IsInt() || q.Cmp(big.NewRat(lo, 1)) < 0 || q.Cmp(big.NewRat(hi, 1)) > 0 {
		return 0, fmt.Errorf("shm_size %q: want a whole number of bytes from 1Mi to 1Ti", s)
	}
	// Rounded up to whole KiB, the unit of tmpfs's size option.
	n := q.Num().Int64()
	return (n + 1023) &^ 1023, nil
}
