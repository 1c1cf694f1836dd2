package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStats reports a pod's CPU, memory, network and processes, and
// its containers' statistics.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := s.index.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	st, err := s.stats.PodStats(ctx, sb)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}
