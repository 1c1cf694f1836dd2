package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
)

// The runtime and sandbox controller of a handler, a pod or a container,
// as the configuration in effect (s.current()) has them; shared by the
// RPCs and recovery.

// runtimeFor is the runtime of handler.
func (s *Server) runtimeFor(handler string) (runtime.Runtime, error) {
	return s.current().Runtime(handler)
}

// sandboxKind is the kind of sandbox rec's pod runs: the one its record
// names, else (a record from before kinds) its handler's.
func (s *Server) sandboxKind(rec sandbox.Record) podsandbox.Kind {
	return podsandbox.KindOf(rec.Kind, s.current().Config().Runtimes[rec.RuntimeHandler].Type)
}

// sandboxController is the controller of rec's pod (see
// internal/podsandbox).
func (s *Server) sandboxController(rec sandbox.Record) (podsandbox.Controller, error) {
	return s.current().SandboxController(rec.RuntimeHandler, s.sandboxKind(rec))
}

// sandboxTraits are what the kind of sandbox handler runs declares; an
// unknown handler's are the pause container's.
func (s *Server) sandboxTraits(handler string) podsandbox.Traits {
	return podsandbox.KindFor(s.current().Config().Runtimes[handler].Type).Traits()
}

// errUnknownHandler is wrapped when a container's record names no runtime
// handler (it predates the field) and its pod's record is gone.
var errUnknownHandler = errors.New("the container's runtime handler is unknown")

// errNoRuntimeHolds is wrapped by ownerRuntime when no runtime knows the
// container.
var errNoRuntimeHolds = fmt.Errorf("no runtime handler holds the container: %w", errdefs.ErrNotFound)

// runtimeForContainer returns the runtime of the handler rec names, else
// its pod's. Without either it returns an error wrapping errUnknownHandler
// and errdefs.ErrNotFound.
func (s *Server) runtimeForContainer(rec container.Record) (runtime.Runtime, error) {
	if rec.RuntimeHandler != "" {
		return s.runtimeFor(rec.RuntimeHandler)
	}
	sb, err := s.index.Get(rec.SandboxID)
	if err != nil {
		return nil, fmt.Errorf("container's pod: %w: %w", err, errUnknownHandler)
	}
	return s.runtimeFor(sb.Record().RuntimeHandler)
}

// containerCapabilities are what the runtime of rec's handler offers
// beyond runtime.Runtime; none when the handler is unknown.
func (s *Server) containerCapabilities(rec container.Record) runtime.Capabilities {
	handler := rec.RuntimeHandler
	if handler == "" {
		sb, err := s.index.Get(rec.SandboxID)
		if err != nil {
			return runtime.Capabilities{}
		}
		handler = sb.Record().RuntimeHandler
	}
	return s.current().Capabilities(handler)
}

// ownerRuntime is runtimeForContainer, except that a container whose
// handler is unknown is looked for in every handler's runtime: the one
// that knows its ID holds it. When none does, the error wraps
// errNoRuntimeHolds.
func (s *Server) ownerRuntime(ctx context.Context, rec container.Record) (runtime.Runtime, error) {
	rt, err := s.runtimeForContainer(rec)
	if !errors.Is(err, errUnknownHandler) {
		return rt, err
	}
	runtimes := s.current().Runtimes()
	for _, name := range slices.Sorted(maps.Keys(runtimes)) {
		if _, err := runtimes[name].State(ctx, rec.ID); err == nil {
			return runtimes[name], nil
		}
	}
	return nil, fmt.Errorf("container %s: %w", rec.ID, errNoRuntimeHolds)
}

// deleteFromRuntime deletes rec's runtime container. One whose handler is
// unknown is deleted with every handler: Delete kills what still runs, and
// succeeds for an ID its runtime does not know.
func (s *Server) deleteFromRuntime(ctx context.Context, rec container.Record) error {
	rt, err := s.runtimeForContainer(rec)
	if err == nil {
		return rt.Delete(ctx, rec.ID)
	}
	if !errors.Is(err, errUnknownHandler) {
		return err
	}
	runtimes := s.current().Runtimes()
	for _, name := range slices.Sorted(maps.Keys(runtimes)) {
		if err := runtimes[name].Delete(ctx, rec.ID); err != nil {
			return fmt.Errorf("handler %s: %w", name, err)
		}
	}
	return nil
}
