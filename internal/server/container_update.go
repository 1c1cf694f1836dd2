package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/specgen"
)

// UpdateContainerResources changes a created or running container's
// cgroup limits; the bundle's spec is updated too, so the values survive a
// daemon restart.
func (s *Server) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.OpMu.Lock()
	defer c.OpMu.Unlock()
	rec := c.Record()
	if rec.State != container.StateRunning && rec.State != container.StateCreated {
		return nil, fmt.Errorf("container %s is %s: %w", c.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if req.GetLinux() == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	res, err := specgen.LinuxResources(podrequest.Resources(req.GetLinux()), s.host)
	if err != nil {
		return nil, err
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return nil, err
	}
	res, others, err := s.nriUpdateContainer(ctx, c, res)
	if err != nil {
		return nil, err
	}
	if err := rt.Update(ctx, c.ID, res); err != nil {
		return nil, fmt.Errorf("update container resources: %w", err)
	}
	s.keepIOWeight(ctx, c.ID, res)
	s.nriPostUpdateContainer(ctx, c, others)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}
