package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandboxMetrics reports the cAdvisor-style metrics of every ready
// pod: the pod's own (its cgroup and network interfaces) and one entry per
// running container (internal/podstats). It reads cgroup files, /proc and
// the runtime's statistics, and starts no process. A pod or container that
// cannot be read is left out and logged, as containerd does, so that one
// broken pod does not hide the node's metrics.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	pods, err := s.stats.PodMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: pods}, nil
}
