package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/server"
)

// setLogLevel applies a log_level: podbay's own loggers (slog, and klog,
// which the streaming server logs through, via slog) follow level;
// containers/image and containers/storage log through logrus, whose
// info-level chatter (platform notes) stays out unless debugging.
func setLogLevel(level *slog.LevelVar, name string) {
	var l slog.Level
	_ = l.UnmarshalText([]byte(name)) // validated
	level.Set(l)
	if name == "debug" {
		logrus.SetLevel(logrus.InfoLevel)
	} else {
		logrus.SetLevel(logrus.WarnLevel)
	}
}

// reloadHooks are what the server calls to set up what a reloaded
// configuration adds, the same way as at start.
func (d *daemon) reloadHooks() server.ReloadHooks {
	return server.ReloadHooks{
		NewRuntime: func(cfg *config.Config, name string) (runtime.Runtime, error) {
			rt, _, err := newRuntime(name, cfg, d.conmon, d.systemd)
			return rt, err
		},
		NewNetwork: func(cfg *config.Config) (server.NetworkManager, error) {
			return newNetwork(cfg)
		},
		SetLogLevel: func(name string) { setLogLevel(d.level, name) },
	}
}

// newNetwork sets up CNI as cfg says.
func newNetwork(cfg *config.Config) (*network.Manager, error) {
	return network.New(network.Config{
		ConfDir:       cfg.Network.ConfDir,
		PluginDirs:    cfg.Network.PluginDirs,
		CacheDir:      cfg.Network.CacheDir,
		IfName:        "eth0",
		WriteDefault:  cfg.Network.WriteDefault,
		DefaultName:   cfg.Network.DefaultName,
		DefaultBridge: cfg.Network.DefaultBridge,
		DefaultSubnet: cfg.Network.DefaultSubnet,
		PluginTimeout: time.Duration(cfg.Network.PluginTimeout),
	})
}

// watchReloads reloads the configuration on every SIGHUP, as CRI-O does,
// until stop is called; stop waits for a reload under way and may be
// called more than once. Before and after, SIGHUP is ignored: it must not
// kill a daemon that is starting or shutting down.
func (d *daemon) watchReloads(ctx context.Context) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-hup:
				d.reload(ctx)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(hup)
			signal.Ignore(syscall.SIGHUP)
			close(done)
			wg.Wait()
		})
	}
}

// reload reads the configuration file again, with the command line's
// flags over it, and has the server apply it. Keys that need a restart are
// compared with the configuration the daemon started with.
func (d *daemon) reload(ctx context.Context) {
	log.G(ctx).Info("reloading configuration", "file", d.flags.configPath)
	d.srv.Reload(ctx, func() (*config.ReloadPlan, error) {
		next, err := d.flags.load()
		if err != nil {
			return nil, err
		}
		return config.PlanReload(d.running, next)
	})
}
