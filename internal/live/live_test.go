package live

import (
	"context"
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/runtime"
)

// fakeRuntime is a runtime.Runtime that reports features; its other
// methods are never called here.
type fakeRuntime struct {
	runtime.Runtime
	f ocifeatures.Handler
}

func (r fakeRuntime) Features() ocifeatures.Handler { return r.f }

func testConfig() *Config {
	cfg := config.Default()
	cfg.Runtimes = map[string]config.Runtime{"runc": {Path: "/bin/true"}, "kata": {Path: "/bin/true", Type: "vm"}}
	cfg.DefaultRuntime = "runc"
	return NewConfig(cfg,
		map[string]runtime.Runtime{"runc": fakeRuntime{f: ocifeatures.Handler{UserNamespaces: true}}},
		map[string]error{"kata": errors.New("shim not found")})
}

func TestConfigHandlers(t *testing.T) {
	c := testConfig()
	if _, err := c.Runtime("runc"); err != nil {
		t.Errorf("runc: %v", err)
	}
	for _, h := range []string{"kata", "nope"} {
		if _, err := c.Runtime(h); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want InvalidArgument", h, err)
		}
	}
	if !c.Features("runc").UserNamespaces || c.Capabilities("runc").Features == nil {
		t.Errorf("runc's features not found: %+v", c.Capabilities("runc"))
	}
	if c.Features("kata") != (ocifeatures.Handler{}) || c.Capabilities("kata").Tasks != nil {
		t.Errorf("an unavailable handler has capabilities: %+v", c.Capabilities("kata"))
	}
}

// A lease holds its handler until released, once however often Release is
// called.
func TestAcquire(t *testing.T) {
	s := NewState(testConfig())
	l, err := s.Acquire("")
	if err != nil || l.Handler != "runc" || !l.Capabilities.HandlerFeatures().UserNamespaces {
		t.Fatalf("Acquire(\"\") = %+v, %v; want the default handler", l, err)
	}
	if _, err := s.Acquire("kata"); err == nil {
		t.Error("acquired an unavailable handler")
	}
	used, err := s.handlersInUse(t.Context(), Env{})
	if err != nil || !used["runc"] {
		t.Errorf("in use while leased: %v, %v", used, err)
	}
	l.Release()
	l.Release()
	used, _ = s.handlersInUse(t.Context(), Env{Recorded: func(ctx context.Context) (map[string]bool, error) {
		return map[string]bool{"kata": true}, nil
	}})
	if used["runc"] || !used["kata"] {
		t.Errorf("in use after release: %v, want the recorded kata only", used)
	}
}

func TestInstanceKeysEqual(t *testing.T) {
	a := config.Runtime{Path: "/usr/bin/runc", Root: "/run/runc", NetworkOrder: "before", PodAnnotations: []string{"x"}}
	b := a
	b.NetworkOrder, b.PodAnnotations, b.AllowNetworkAfter = "after", nil, true
	if !instanceKeysEqual(a, b) {
		t.Error("per-pod settings made a new instance")
	}
	b.Root = "/run/other"
	if instanceKeysEqual(a, b) {
		t.Error("a new root kept the instance")
	}
}
