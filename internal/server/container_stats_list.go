package server

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListContainerStats reports the statistics of the containers matching the
// filter (ID, pod, labels).
func (s *Server) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListContainerStatsResponse{}
	for _, c := range s.containers.List() {
		rec := c.Record()
		if f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()) ||
			f.GetPodSandboxId() != "" && !strings.HasPrefix(rec.SandboxID, f.GetPodSandboxId()) ||
			!matchLabels(f.GetLabelSelector(), rec.Labels) {
			continue
		}
		st, err := s.stats.CachedContainerStats(ctx, c)
		if err != nil {
			return nil, err
		}
		resp.Stats = append(resp.Stats, st)
	}
	return resp, nil
}
