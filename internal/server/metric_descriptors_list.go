package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/podstats"
)

// ListMetricDescriptors describes every metric ListPodSandboxMetrics may
// report. The kubelet reads it once, when it starts, and drops any metric
// without a descriptor, so the list is the same whatever the host's cgroup
// version: a metric this host cannot measure is described but not sent.
func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: podstats.Descriptors()}, nil
}
