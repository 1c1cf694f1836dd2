package server

import (
	"context"
	"fmt"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/signal"
)

// StopContainer stops a running container with its image's stop signal,
// then SIGKILL after the timeout. Stopping a stopped or unknown container
// succeeds (CRI spec: idempotent).
func (s *Server) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		if errdefs.IsNotFound(err) {
			return &runtimeapi.StopContainerResponse{}, nil
		}
		return nil, err
	}
	c.OpMu.Lock()
	defer c.OpMu.Unlock()
	if err := s.stopContainerLocked(ctx, c, time.Duration(req.GetTimeout())*time.Second); err != nil {
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
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return err
	}
	sig := syscall.SIGTERM
	if rec.StopSignal != "" {
		if sig, err = signal.Parse(rec.StopSignal); err != nil {
			log.G(ctx).Warn("image stop signal not understood; using SIGTERM", "signal", rec.StopSignal, "err", err)
			sig = syscall.SIGTERM
		}
	}
	if err := rt.Stop(ctx, c.ID, timeout, sig); err != nil {
		return fmt.Errorf("stop container: %w", err)
	}
	// A created container that never ran has no exit file: mark it here.
	st, exited, err := rt.Exited(c.ID)
	if err == nil && exited {
		s.recordExit(ctx, c, st)
	} else if rec.State == container.StateCreated {
		s.recordExit(ctx, c, exitNow(0))
	}
	log.G(ctx).Info("container stopped")
	return nil
}

func (s *Server) runtimeForContainer(rec container.Record) (runtime.Runtime, error) {
	sb, err := s.index.Get(rec.SandboxID)
	if err != nil {
		return nil, fmt.Errorf("container's pod: %w", err)
	}
	return s.runtimeFor(sb.Record().RuntimeHandler)
}
