package server

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// RemoveContainer removes a container, force-stopping it if it runs.
// Removing an unknown container succeeds (CRI spec: idempotent).
func (s *Server) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	err := withPresent(s.containers, req.GetContainerId(), lockContainerOp, func(c *container.Container) error {
		return s.removeContainerEarly(ctx, c)
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// removeContainerLocked removes c; the caller holds c.OpMu. Each step is
// idempotent and Removing is persisted first, so a restart finishes it.
func (s *Server) removeContainerLocked(ctx context.Context, c *container.Container) error {
	rec := c.Update(func(r *container.Record) { r.Removing = true })
	s.saveContainerOrLog(ctx, rec)
	if err := s.stopContainerLocked(ctx, c, 0); err != nil {
		return err
	}
	timer := s.metrics.StartContainer(ctx, "remove")
	if err := s.releaseContainer(ctx, rec, timer); err != nil {
		return err
	}
	c.EventMu.Lock()
	if err := s.db.Delete(containerBucket, c.ID); err != nil {
		c.EventMu.Unlock()
		return fmt.Errorf("delete container record: %w", err)
	}
	s.containers.Delete(c)
	s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	c.EventMu.Unlock()
	timer.Phase("persist")
	s.nriRemoveContainer(ctx, rec)
	log.G(ctx).Info("container removed")
	return nil
}

func exitNow(code int32) runtime.ExitStatus {
	return runtime.ExitStatus{Code: code, ExitedAt: time.Now()}
}
