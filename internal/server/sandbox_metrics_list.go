package server

import (
	"context"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/sandbox"
)

// ListPodSandboxMetrics reports the cAdvisor-style metrics (see
// metricDefs) of every ready pod: the pod's own (its cgroup and network
// interfaces) and one entry per running container. It reads cgroup files,
// /proc and the runtime's statistics, and starts no process. A pod or
// container that cannot be read is left out and logged, as containerd
// does, so that one broken pod does not hide the node's metrics.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	fs := s.storageFs()
	resp := &runtimeapi.ListPodSandboxMetricsResponse{}
	bundles := map[string]bool{}
	for _, sb := range s.index.List() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if sb.Record().Phase != sandbox.PhaseReady {
			continue
		}
		pm := s.podMetrics(ctx, sb, fs)
		resp.PodMetrics = append(resp.PodMetrics, pm)
		for _, c := range pm.ContainerMetrics {
			if ctr, err := s.containers.Get(c.ContainerId); err == nil {
				bundles[filepath.Join(ctr.Record().Dir, "bundle")] = true
			}
		}
	}
	s.specs.retain(bundles)
	return resp, nil
}
