package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// StopContainer stops a running container with its image's stop signal,
// then SIGKILL after the timeout. Stopping a stopped or unknown container
// succeeds (CRI spec: idempotent).
func (s *Server) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	err := withPresent(s.containers, req.GetContainerId(), lockContainerOp, func(c *container.Container) error {
		return s.stopContainerLocked(ctx, c, time.Duration(req.GetTimeout())*time.Second)
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// stopContainerLocked stops c; the caller holds c.OpMu.
func (s *Server) stopContainerLocked(ctx context.Context, c *container.Container, timeout time.Duration) error {
	rec := c.Record()
	if rec.State == container.StateExited || rec.State == container.StateCreating || !rec.RuntimeCreated {
		return nil
	}
	timer := s.metrics.StartContainer(ctx, "stop")
	rt, err := s.ownerRuntime(ctx, rec)
	if errors.Is(err, errNoRuntimeHolds) {
		// Gone from the host (a reboot) while its pod's record is gone too.
		c.Update(func(r *container.Record) { r.Message = "container not found in any runtime" })
		s.recordExit(ctx, c, exitNow(255))
		return nil
	}
	if err != nil {
		return err
	}
	sig, err := stopSignalOf(rec.StopSignal)
	if err != nil {
		log.G(ctx).Warn("stop signal not understood; using SIGTERM", "signal", rec.StopSignal, "err", err)
		sig = syscall.SIGTERM
	}
	c.MarkStopping()
	if err := rt.Stop(ctx, c.ID, timeout, sig); err != nil {
		return fmt.Errorf("stop container: %w", err)
	}
	timer.Phase("runtime_stop")
	// A created container that never ran has no exit file: mark it here.
	st, exited, err := rt.Exited(c.ID)
	if err == nil && exited {
		s.recordExit(ctx, c, st)
	} else if rec.State == container.StateCreated {
		s.recordExit(ctx, c, exitNow(0))
	}
	timer.Phase("persist")
	log.G(ctx).Info("container stopped")
	return nil
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
