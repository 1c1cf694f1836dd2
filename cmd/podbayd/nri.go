package main

import (
	"context"
	"fmt"
	"time"

	validator "github.com/containerd/nri/plugins/default-validator"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/nri"
	"github.com/podbay/podbay/internal/server"
)

// newNRI returns the NRI relay [nri] configures; nil when disabled, which
// the server treats as "no plugins" at the cost of a nil check.
// CDI devices a plugin asks for are resolved by devices (nil: refused).
func newNRI(cfg *config.Config, devices server.CDIDevices) *nri.NRI {
	if !cfg.NRI.Enable {
		return nil
	}
	var injectCDI func(context.Context, *specs.Spec, []string) error
	if devices != nil {
		injectCDI = devices.Inject
	}
	return nri.New(nri.Options{
		CDI:                 injectCDI,
		SocketPath:          cfg.NRI.SocketPath,
		PluginPath:          cfg.NRI.PluginPath,
		PluginConfigPath:    cfg.NRI.PluginConfigPath,
		RegistrationTimeout: time.Duration(cfg.NRI.PluginRegistrationTimeout),
		RequestTimeout:      time.Duration(cfg.NRI.PluginRequestTimeout),
		DisableConnections:  cfg.NRI.DisableConnections,
		Version:             server.Version,
		Validator:           validatorConfig(cfg.NRI.DefaultValidator),
	})
}

// validatorConfig is [nri.default_validator] as NRI's validator takes it.
func validatorConfig(v config.NRIValidator) *validator.DefaultValidatorConfig {
	return &validator.DefaultValidatorConfig{
		Enable:                                v.Enable,
		RejectOCIHookAdjustment:               v.RejectOCIHookAdjustment,
		RejectRuntimeDefaultSeccompAdjustment: v.RejectRuntimeDefaultSeccompAdjustment,
		RejectUnconfinedSeccompAdjustment:     v.RejectUnconfinedSeccompAdjustment,
		RejectCustomSeccompAdjustment:         v.RejectCustomSeccompAdjustment,
		RejectNamespaceAdjustment:             v.RejectNamespaceAdjustment,
		RejectSysctlAdjustment:                v.RejectSysctlAdjustment,
		RequiredPlugins:                       v.RequiredPlugins,
		TolerateMissingAnnotation:             v.TolerateMissingPluginsAnnotation,
	}
}

// startNRI starts the pre-registered plugins and the plugin socket once
// the records are published (each plugin is handed the existing pods and
// containers when it registers), and stops them when the daemon closes,
// after the CRI has stopped serving. Pre-registered plugins are the
// daemon's children and end with it; pods keep running.
func (d *daemon) startNRI() error {
	if !d.cfg.NRI.Enable {
		return nil
	}
	if err := d.srv.StartNRI(); err != nil {
		return fmt.Errorf("%w (set [nri] enable = false to run without NRI)", err)
	}
	d.closers = append(d.closers, func() error { d.srv.StopNRI(); return nil })
	return nil
}
