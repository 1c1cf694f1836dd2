package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/live"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/store"
)

// A reload (SIGHUP) applies a new configuration to the running server
// (internal/live publishes it); here is what the server gives it: the
// handlers its records name, the image store's and the network's new
// settings, the log level.

// ReloadHooks are what Reload needs from the daemon to set up what a new
// configuration names. A nil hook refuses the changes that need it.
type ReloadHooks struct {
	// NewRuntime sets up handler name of cfg.
	NewRuntime func(cfg *config.Config, name string) (runtime.Runtime, error)
	// NewNetwork sets up the pod network of cfg.
	NewNetwork func(cfg *config.Config) (NetworkManager, error)
	// SetLogLevel applies cfg.LogLevel to the daemon's loggers.
	SetLogLevel func(level string)
}

// ReloadResult is what a reload did; Status shows the last one.
type ReloadResult = live.Result

// current returns the configuration in effect.
func (s *Server) current() *live.Config { return s.live.Current() }

// LastReload returns the result of the last reload, nil before the first.
func (s *Server) LastReload() *ReloadResult { return s.live.Last() }

// Reload applies the configuration load returns (live.State.Reload): the
// runtime handlers, the default handler, the pause image, the CNI
// settings, and here the registries.conf and policy.json paths, the log
// level and sandbox_timeout. An error from load (an invalid file) changes
// nothing. Everything is logged, and the result kept for Status.
func (s *Server) Reload(ctx context.Context, load func() (*config.ReloadPlan, error)) ReloadResult {
	env := live.Env{
		NewRuntime:    s.reloadHooks.NewRuntime,
		Recorded:      s.recordedHandlers,
		PinPauseImage: func(ref string) error { return s.images.SetPinned([]string{ref}) },
		Published:     s.reloaded,
	}
	if s.reloadHooks.NewNetwork != nil {
		env.NewNetwork = s.reloadNetwork
	}
	return s.live.Reload(ctx, load, env)
}

// reloadNetwork sets up the pod network of next; new pods use it once the
// reload publishes next.
func (s *Server) reloadNetwork(ctx context.Context, old, next *config.Config) (func(), error) {
	m, err := s.reloadHooks.NewNetwork(next)
	if err != nil {
		return nil, err
	}
	o, n := old.Network, next.Network
	if o.DefaultName != n.DefaultName || o.DefaultBridge != n.DefaultBridge || o.DefaultSubnet != n.DefaultSubnet {
		// podbay's own default conflist follows its settings; an
		// operator's is left alone.
		if err := m.UpdatePodCIDR(ctx, n.DefaultSubnet); err != nil {
			log.G(ctx).Warn("rewrite the default cni network config", "err", err)
		}
	}
	return func() { s.network.set(m) }, nil
}

// reloaded applies what a published configuration changes beside the
// handlers and the network.
func (s *Server) reloaded(old, next *config.Config) {
	c := next.Image
	s.images.SetRegistries(image.Registries{Conf: c.RegistriesConf, ConfDir: c.RegistriesConfDir, Policy: c.SignaturePolicy, PolicyDir: c.SignaturePolicyDir})
	if s.reloadHooks.SetLogLevel != nil {
		s.reloadHooks.SetLogLevel(next.LogLevel)
	}
	if next.PauseImage != old.PauseImage {
		s.WarmPauseImage()
	}
}

// CloseRuntimes closes every runtime handler instance the server holds,
// those a reload replaced included. Containers keep running. The daemon
// calls it once the server is shut down.
func (s *Server) CloseRuntimes() error { return s.live.Close() }

// recordedHandlers returns the handlers some record names (a pod being
// made, running, stopped or half undone).
func (s *Server) recordedHandlers(ctx context.Context) (map[string]bool, error) {
	used := map[string]bool{}
	for _, bucket := range []string{sandboxBucket, containerBucket} {
		bad, err := s.db.ForEach(bucket, func(r store.Record) error {
			var rec struct {
				RuntimeHandler string `json:"runtimeHandler"`
			}
			if json.Unmarshal(r.Data, &rec) == nil && rec.RuntimeHandler != "" {
				used[rec.RuntimeHandler] = true
			}
			return nil
		})
		for _, k := range bad {
			log.G(ctx).Error("quarantined unreadable record", "bucket", bucket, "id", k)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", bucket, err)
		}
	}
	return used, nil
}
