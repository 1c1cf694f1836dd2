package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestLoadDefaultsAndOverrides(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load(filepath.Join(dir, "missing.toml"), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if cfg.Network.CacheDir != "/var/lib/podbay/cni" || cfg.Image.StorageRoot != "/var/lib/podbay/storage" {
		t.Fatalf("derived dirs: %q %q", cfg.Network.CacheDir, cfg.Image.StorageRoot)
	}
	if cfg.Runtimes["runc"].NetworkOrder != OrderBefore || cfg.Runtimes["runc"].Root != "/run/podbay/runtimes/runc" {
		t.Fatalf("runc defaults %+v", cfg.Runtimes["runc"])
	}
	if got := cfg.StreamListenAddress(); got != "127.0.0.1:0" || cfg.StreamIdleTimeout.String() != "4h0m0s" {
		t.Fatalf("streaming defaults: address %q, idle timeout %v", got, cfg.StreamIdleTimeout)
	}
	if cfg.Network.PluginTimeout.String() != "1m0s" || cfg.Image.PullProgressTimeout.String() != "5m0s" || cfg.Runtimes["runc"].Timeout != 0 {
		t.Fatalf("fault timeouts: plugin %v, pull progress %v, runc %v",
			cfg.Network.PluginTimeout, cfg.Image.PullProgressTimeout, cfg.Runtimes["runc"].Timeout)
	}
	if _, err := Load(filepath.Join(dir, "missing.toml"), false); err == nil {
		t.Fatal("an explicitly named missing file loaded")
	}

	path := filepath.Join(dir, "podbay.toml")
	os.WriteFile(path, []byte(`
log_level = "debug"
sandbox_timeout = "90s"
stream_address = "::1"
stream_port = 10010
stream_idle_timeout = "30m"
[network]
default_subnet = "10.5.0.0/16"
plugin_timeout = "5s"
[image]
pull_progress_timeout = "30s"
sync_rootfs_records = true
[runtimes.vm]
path = "/bin/true"
network_order = "after"
timeout = "3m"
`), 0o644)
	cfg, err = Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultRuntime = "vm"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.LogLevel != "debug" || cfg.SandboxTimeout.String() != "1m30s" || cfg.Network.DefaultSubnet != "10.5.0.0/16" {
		t.Fatalf("file values not applied: %+v", cfg)
	}
	if cfg.Network.PluginTimeout.String() != "5s" || cfg.Image.PullProgressTimeout.String() != "30s" || cfg.Runtimes["vm"].Timeout.String() != "3m0s" {
		t.Fatalf("fault timeouts not applied: plugin %v, pull progress %v, handler %v",
			cfg.Network.PluginTimeout, cfg.Image.PullProgressTimeout, cfg.Runtimes["vm"].Timeout)
	}
	if !cfg.Image.SyncRootfsRecords {
		t.Fatal("sync_rootfs_records not applied")
	}
	if got := cfg.StreamListenAddress(); got != "[::1]:10010" || cfg.StreamIdleTimeout.String() != "30m0s" {
		t.Fatalf("streaming settings: address %q, idle timeout %v", got, cfg.StreamIdleTimeout)
	}
	if _, ok := cfg.Runtimes["runc"]; ok || cfg.Runtimes["vm"].NetworkOrder != OrderAfter {
		t.Fatalf("a [runtimes] table must replace the built-in list: %+v", cfg.Runtimes)
	}
}

func TestRuntimeTypes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.toml")
	os.WriteFile(path, []byte(`
default_runtime = "runc"
[runtimes.runc]
path = "runc"
[runtimes.kata]
type = "vm"
path = "containerd-shim-kata-v2"
config_path = "/etc/kata-containers/configuration.toml"
pod_annotations = ["io.katacontainers.*"]
[runtimes.shim]
type = "vm"
path = "containerd-shim-runc-v2"
runtime_path = "/usr/sbin/runc"
runtime_root = "/run/podbay/shim-runc"
[runtimes.gvisor]
type = "vm"
path = "containerd-shim-runsc-v1"
config_path = "/etc/podbay/runsc.toml"
options_type = "io.containerd.runsc.v1.options"
requires_network_before_start = true
`), 0o644)
	cfg, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	runc, kata, shim := cfg.Runtimes["runc"], cfg.Runtimes["kata"], cfg.Runtimes["shim"]
	// No annotation passes by default, for either handler type.
	if runc.Type != TypeOCI || len(runc.PodAnnotations) != 0 || len(runc.ContainerAnnotations) != 0 {
		t.Errorf("oci handler defaults: %+v", runc)
	}
	if kata.Type != TypeVM || kata.ConfigPath == "" || len(kata.PodAnnotations) != 1 || kata.ContainerAnnotations != nil {
		t.Errorf("kata handler: %+v", kata)
	}
	if shim.Type != TypeVM || shim.Root != "/run/podbay/runtimes/shim" || shim.RuntimeRoot != "/run/podbay/shim-runc" || shim.PodAnnotations != nil {
		t.Errorf("shim handler: %+v", shim)
	}
	if gv := cfg.Runtimes["gvisor"]; gv.OptionsType != "io.containerd.runsc.v1.options" || !gv.RequiresNetworkBeforeStart ||
		gv.AllowNetworkAfter || gv.NetworkOrder != OrderBefore || shim.RequiresNetworkBeforeStart {
		t.Errorf("gvisor handler: %+v", gv)
	}
}

func TestLoadRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key":  `lisen = "/x"`,
		"bad toml":     `listen = `,
		"bad duration": `sandbox_timeout = "soon"`,
	} {
		path := filepath.Join(t.TempDir(), "c.toml")
		os.WriteFile(path, []byte(body), 0o644)
		if _, err := Load(path, false); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	for name, mod := range map[string]func(*Config){
		"relative root":           func(c *Config) { c.Root = "var/lib" },
		"bad level":               func(c *Config) { c.LogLevel = "loud" },
		"bad cg driver":           func(c *Config) { c.CgroupDriver = "systemd-ish" },
		"bad order":               func(c *Config) { c.Runtimes["runc"] = Runtime{Path: "runc", NetworkOrder: "sideways"} },
		"no default rt":           func(c *Config) { c.DefaultRuntime = "kata" },
		"bad oom":                 func(c *Config) { c.RestrictOOMScoreAdj = "maybe" },
		"bad sandbox_process":     func(c *Config) { c.SandboxProcess = "never" },
		"shm_size not a quantity": func(c *Config) { c.ShmSize = "lots" },
		"shm_size too small":      func(c *Config) { c.ShmSize = "64Ki" },
		"shm_size too large":      func(c *Config) { c.ShmSize = "2Ti" },
		"shm_size fraction":       func(c *Config) { c.ShmSize = "1.5" },
		"bad driver":              func(c *Config) { c.Image.Driver = "btrfs" },
		"stream any":              func(c *Config) { c.StreamAddress = "0.0.0.0" },
		"stream name":             func(c *Config) { c.StreamAddress = "localhost" },
		"stream port":             func(c *Config) { c.StreamPort = 70000 },
		"stream idle":             func(c *Config) { c.StreamIdleTimeout = 0 },
		"tls no key":              func(c *Config) { c.StreamTLSCert = "/c.pem" },
		"tls no cert":             func(c *Config) { c.StreamTLSKey = "/k.pem" },
		"tls ca alone":            func(c *Config) { c.StreamTLSCA = "/ca.pem" },
		"plugin timeout":          func(c *Config) { c.Network.PluginTimeout = 0 },
		"pull progress":           func(c *Config) { c.Image.PullProgressTimeout = -1 },
		"partial max bytes":       func(c *Config) { c.Image.PartialMaxBytes = -1 },
		"partial ttl":             func(c *Config) { c.Image.PartialTTL = 0 },
		"gzip relative":           func(c *Config) { c.Image.GzipDecompressor = "igzip" },
		"gzip empty":              func(c *Config) { c.Image.GzipDecompressor = "" },
		"rt timeout":              func(c *Config) { c.Runtimes["runc"] = Runtime{Path: "runc", Timeout: -1} },
		"bad type":                func(c *Config) { c.Runtimes["runc"] = Runtime{Path: "runc", Type: "wasm"} },
		"oci options":             func(c *Config) { c.Runtimes["runc"] = Runtime{Path: "runc", RuntimePath: "/usr/sbin/runc"} },
		"both options": func(c *Config) {
			c.Runtimes["kata"] = Runtime{Type: TypeVM, Path: "shim", RuntimeRoot: "/run/x", ConfigPath: "/etc/kata.toml"}
		},
		"relative cfg": func(c *Config) { c.Runtimes["kata"] = Runtime{Type: TypeVM, Path: "shim", ConfigPath: "kata.toml"} },
		"type no path": func(c *Config) {
			c.Runtimes["kata"] = Runtime{Type: TypeVM, Path: "shim", OptionsType: "io.containerd.runsc.v1.options"}
		},
		"needs before": func(c *Config) {
			c.Runtimes["vm"] = Runtime{Type: TypeVM, Path: "shim", NetworkOrder: OrderAfter, RequiresNetworkBeforeStart: true}
		},
		"nri socket":   func(c *Config) { c.NRI.SocketPath = "nri.sock" },
		"nri plugins":  func(c *Config) { c.NRI.PluginPath = "" },
		"nri request":  func(c *Config) { c.NRI.PluginRequestTimeout = 0 },
		"nri register": func(c *Config) { c.NRI.PluginRegistrationTimeout = -1 },
		"validator required, off": func(c *Config) {
			c.NRI.DefaultValidator = NRIValidator{RequiredPlugins: []string{"policy"}}
		},
		"validator empty plugin": func(c *Config) {
			c.NRI.DefaultValidator = NRIValidator{Enable: true, RequiredPlugins: []string{""}}
		},
		"validator bad annotation": func(c *Config) {
			c.NRI.DefaultValidator = NRIValidator{Enable: true, TolerateMissingPluginsAnnotation: "not a key"}
		},
		"bad pattern": func(c *Config) {
			c.Runtimes["kata"] = Runtime{Type: TypeVM, Path: "shim", PodAnnotations: []string{"io.[x"}}
		},
		"reserved pattern": func(c *Config) {
			c.Runtimes["runc"] = Runtime{Type: TypeOCI, Path: "runc", ContainerAnnotations: []string{"org.systemd.property.*"}}
		},
	} {
		c := Default()
		mod(c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

func TestNRIConfig(t *testing.T) {
	c := Default()
	if n := c.NRI; !n.Enable || n.SocketPath != "/var/run/nri/nri.sock" || n.PluginPath != "/opt/nri/plugins" ||
		n.PluginConfigPath != "/etc/nri/conf.d" || n.DisableConnections ||
		time.Duration(n.PluginRegistrationTimeout) != 5*time.Second || time.Duration(n.PluginRequestTimeout) != 2*time.Second {
		t.Errorf("NRI defaults: %+v", n)
	}
	path := filepath.Join(t.TempDir(), "c.toml")
	body := `[nri]
enable = true
socket_path = "/run/x/nri.sock"
plugin_path = "/usr/lib/nri"
plugin_config_path = "/etc/x/nri"
plugin_registration_timeout = "10s"
plugin_request_timeout = "500ms"
disable_connections = true

[nri.default_validator]
enable = true
reject_oci_hook_adjustment = true
reject_runtime_default_seccomp_adjustment = true
reject_unconfined_seccomp_adjustment = true
reject_custom_seccomp_adjustment = true
reject_namespace_adjustment = true
reject_sysctl_adjustment = true
required_plugins = ["policy"]
tolerate_missing_plugins_annotation = "example.com/tolerate-missing"
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := c.NRI; n.SocketPath != "/run/x/nri.sock" || n.PluginPath != "/usr/lib/nri" || n.PluginConfigPath != "/etc/x/nri" ||
		!n.DisableConnections || time.Duration(n.PluginRegistrationTimeout) != 10*time.Second ||
		time.Duration(n.PluginRequestTimeout) != 500*time.Millisecond {
		t.Errorf("NRI from file: %+v", n)
	}
	want := NRIValidator{Enable: true, RejectOCIHookAdjustment: true, RejectRuntimeDefaultSeccompAdjustment: true,
		RejectUnconfinedSeccompAdjustment: true, RejectCustomSeccompAdjustment: true, RejectNamespaceAdjustment: true,
		RejectSysctlAdjustment: true, RequiredPlugins: []string{"policy"}, TolerateMissingPluginsAnnotation: "example.com/tolerate-missing"}
	if v := c.NRI.DefaultValidator; !reflect.DeepEqual(v, want) {
		t.Errorf("[nri.default_validator] from file: %+v, want %+v", v, want)
	}
	if Default().NRI.DefaultValidator.Enable {
		t.Error("the default validator is on by default")
	}
	// Disabled, its settings are not checked: nothing uses them.
	c = Default()
	c.NRI = NRI{Enable: false, SocketPath: "relative"}
	if err := c.Validate(); err != nil {
		t.Errorf("disabled NRI with unused bad settings: %v", err)
	}
}

func TestShmSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"", 64 << 20}, {"64Mi", 64 << 20}, {"1Gi", 1 << 30}, {"1Mi", 1 << 20}, {"2M", 1954 * 1024}, {"1048577", 1<<20 + 1024},
	} {
		c := Default()
		c.ShmSize = tc.in
		if err := c.Validate(); err != nil {
			t.Errorf("shm_size %q: %v", tc.in, err)
			continue
		}
		if got := c.ShmSizeBytes(); got != tc.want {
			t.Errorf("shm_size %q: %d bytes, want %d", tc.in, got, tc.want)
		}
	}
}
