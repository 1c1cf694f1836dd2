// Package live owns the configuration a running podbayd is in: the
// applied configuration and the runtime handlers set up from it, published
// as one immutable Config, the leases that keep a handler while a pod is
// being made on it, and the reload (SIGHUP) that publishes the next
// Config. An RPC loads the Config once and keeps the runtime it resolved,
// whatever a reload does meanwhile.
package live

import (
	"fmt"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/runtime"
)

// Config is the configuration in effect and the runtime handlers set up
// from it. It is never modified once published.
type Config struct {
	// cfg is the applied configuration: the running daemon's values for
	// keys that need a restart, the reloaded ones for the rest.
	cfg *config.Config
	// runtimes are the usable handlers; unavailable the configured ones
	// that could not be set up, with the reason.
	runtimes    map[string]runtime.Runtime
	unavailable map[string]error
	// caps are what each of runtimes offers beyond runtime.Runtime,
	// found once when the Config is sealed.
	caps map[string]runtime.Capabilities
}

// NewConfig returns the Config of cfg with these handlers; it keeps the
// maps, which nobody may change afterwards.
func NewConfig(cfg *config.Config, runtimes map[string]runtime.Runtime, unavailable map[string]error) *Config {
	l := &Config{cfg: cfg, runtimes: runtimes, unavailable: unavailable}
	l.seal()
	return l
}

// seal finds the capabilities of the handlers; a Config is sealed before
// it is published.
func (l *Config) seal() {
	l.caps = make(map[string]runtime.Capabilities, len(l.runtimes))
	for name, rt := range l.runtimes {
		l.caps[name] = runtime.CapabilitiesOf(rt)
	}
}

// Config is the applied configuration. Callers must not modify it.
func (l *Config) Config() *config.Config { return l.cfg }

// Runtimes are the usable handlers by name. Callers must not modify the
// map.
func (l *Config) Runtimes() map[string]runtime.Runtime { return l.runtimes }

// Unavailable are the configured handlers that could not be set up, with
// the reason. Callers must not modify the map.
func (l *Config) Unavailable() map[string]error { return l.unavailable }

// Runtime is handler's runtime; an unknown or unavailable handler is
// errdefs.ErrInvalidArgument.
func (l *Config) Runtime(handler string) (runtime.Runtime, error) {
	if rt, ok := l.runtimes[handler]; ok {
		return rt, nil
	}
	if err, ok := l.unavailable[handler]; ok {
		return nil, fmt.Errorf("runtime handler %q is not available: %v: %w", handler, err, errdefs.ErrInvalidArgument)
	}
	return nil, fmt.Errorf("unknown runtime handler %q: %w", handler, errdefs.ErrInvalidArgument)
}

// SandboxController is the controller of handler's pods of kind (see
// podsandbox.KindOf), over its runtime. A pinned sandbox needs no runtime:
// its controller works for a handler no longer configured too.
func (l *Config) SandboxController(handler string, kind podsandbox.Kind) (podsandbox.Controller, error) {
	if kind == podsandbox.KindPinned {
		return podsandbox.For(kind, nil, podns.Root(l.cfg.State)), nil
	}
	rt, err := l.Runtime(handler)
	if err != nil {
		return nil, err
	}
	return podsandbox.For(kind, rt, ""), nil
}

// Capabilities are what handler's runtime offers beyond runtime.Runtime;
// none for an unknown handler.
func (l *Config) Capabilities(handler string) runtime.Capabilities {
	return l.caps[handler]
}

// Features is what handler supports beyond the baseline. An oci handler
// found it out when it was set up (`<runtime> features` and the kernel's
// version); a vm handler reports nothing: containerd 2.x asks its shim
// (`shim -info`), which containerd 1.6's containerd-shim-runc-v2 and
// Kata's shim do not answer, and inside a VM the guest's kernel and
// agent, not the host's runtime, would make the mounts.
func (l *Config) Features(handler string) ocifeatures.Handler {
	return l.Capabilities(handler).HandlerFeatures()
}
