package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
)

// ReopenContainerLog makes conmon reopen the container's log file, after
// the kubelet rotated it.
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	rec := c.Record()
	if rec.State != container.StateRunning {
		return nil, fmt.Errorf("container %s is not running: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return nil, err
	}
	if err := rt.ReopenLog(ctx, c.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
