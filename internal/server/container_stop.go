package server

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
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
