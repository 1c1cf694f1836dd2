package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/podbay/podbay/internal/config"
)

// cliFlags are podbayd's command line: the configuration file and the
// flags that override its keys. A reload reads the file again and applies
// the same flags over it.
type cliFlags struct {
	configPath string
	// explicitConfig is set when --config was given: that file must
	// exist; the default path may be missing.
	explicitConfig bool
	version        bool

	listen, root, state, logLevel, logFormat, metricsAddr string
	cniConfDir, cniPluginDirs, pause, registriesConf      string
	streamAddr                                            string
	streamPort                                            int
}

// parseFlags parses args (without the program name); errors exit with
// the usage, as flag.ExitOnError does.
func parseFlags(name string, args []string) *cliFlags {
	f := &cliFlags{}
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.StringVar(&f.configPath, "config", config.DefaultPath, "configuration file (TOML); every key is optional")
	fs.StringVar(&f.listen, "listen", "", "CRI socket (overrides listen)")
	fs.StringVar(&f.root, "root", "", "persistent state dir (overrides root)")
	fs.StringVar(&f.state, "state", "", "runtime state dir (overrides state)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (overrides log_level)")
	fs.StringVar(&f.logFormat, "log-format", "", "text or json (overrides log_format)")
	fs.StringVar(&f.metricsAddr, "metrics-address", "", "Prometheus endpoint host:port (overrides metrics_address)")
	fs.StringVar(&f.cniConfDir, "cni-conf-dir", "", "CNI configuration dir (overrides network.conf_dir)")
	fs.StringVar(&f.cniPluginDirs, "cni-plugin-dirs", "", "comma-separated CNI plugin dirs (overrides network.plugin_dirs)")
	fs.StringVar(&f.pause, "pause-binary", "", "static pause program (overrides pause_binary)")
	fs.StringVar(&f.registriesConf, "registries-conf", "", "registries.conf (overrides image.registries_conf)")
	fs.StringVar(&f.streamAddr, "stream-address", "", "IP address of the Exec/Attach/PortForward streaming server (overrides stream_address)")
	fs.IntVar(&f.streamPort, "stream-port", -1, "port of the streaming server, 0 for any free one (overrides stream_port)")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	_ = fs.Parse(args)
	fs.Visit(func(fl *flag.Flag) { f.explicitConfig = f.explicitConfig || fl.Name == "config" })
	return f
}

// load reads the configuration file over the defaults and applies the
// flags. The result is not validated: Validate fills derived values, and
// a reload compares what the operator wrote (config.PlanReload).
func (f *cliFlags) load() (*config.Config, error) {
	cfg, err := config.Load(f.configPath, !f.explicitConfig)
	if err != nil {
		return nil, err
	}
	for _, o := range []struct {
		flag string
		dst  *string
	}{
		{f.listen, &cfg.Listen}, {f.root, &cfg.Root}, {f.state, &cfg.State}, {f.logLevel, &cfg.LogLevel},
		{f.logFormat, &cfg.LogFormat}, {f.metricsAddr, &cfg.MetricsAddress},
		{f.cniConfDir, &cfg.Network.ConfDir}, {f.pause, &cfg.PauseBinary},
		{f.registriesConf, &cfg.Image.RegistriesConf}, {f.streamAddr, &cfg.StreamAddress},
	} {
		if o.flag != "" {
			*o.dst = o.flag
		}
	}
	if f.cniPluginDirs != "" {
		cfg.Network.PluginDirs = strings.Split(f.cniPluginDirs, ",")
	}
	if f.streamPort >= 0 {
		cfg.StreamPort = f.streamPort
	}
	return cfg, nil
}

// loadValid is load followed by Validate: the configuration the daemon
// runs with.
func (f *cliFlags) loadValid() (raw, cfg *config.Config, err error) {
	raw, err = f.load()
	if err != nil {
		return nil, nil, err
	}
	cfg = raw.Clone()
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return raw, cfg, nil
}

// printConfig is `podbayd config [flags]`: the configuration podbayd would
// run with (defaults, file and flags) as TOML, as `crio config` prints
// CRI-O's. The output is a valid configuration file.
func printConfig(w io.Writer, args []string) error {
	f := parseFlags("podbayd config", args)
	_, cfg, err := f.loadValid()
	if err != nil {
		return err
	}
	src := f.configPath + " (not found: defaults)"
	if _, err := config.Load(f.configPath, false); err == nil {
		src = f.configPath
	}
	fmt.Fprintf(w, "# podbayd's effective configuration: defaults, %s and flags.\n\n", src)
	return cfg.Encode(w)
}
