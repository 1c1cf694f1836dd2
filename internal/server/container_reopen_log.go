package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog makes conmon reopen the container's log file, after
// the kubelet rotated it.
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, rt, err := s.runningContainerRuntime(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := rt.ReopenLog(ctx, c.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
