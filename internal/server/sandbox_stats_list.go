package server

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandboxStats reports the statistics of the pods matching the
// filter.
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxStatsResponse{}
	for _, sb := range s.index.List() {
		rec := sb.Record()
		if f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()) || !matchLabels(f.GetLabelSelector(), rec.Labels) {
			continue
		}
		st, err := s.stats.CachedPodStats(ctx, sb)
		if err != nil {
			return nil, err
		}
		resp.Stats = append(resp.Stats, st)
	}
	return resp, nil
}
