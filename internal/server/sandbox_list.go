package server

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox lists published sandboxes, filtered by ID (or unique
// prefix), state and label selector. A sandbox being created is never
// listed.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range s.index.List() {
		rec := sb.Record()
		if f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()) {
			continue
		}
		state := criState(rec.Phase)
		if f.GetState() != nil && f.GetState().GetState() != state {
			continue
		}
		if !matchLabels(f.GetLabelSelector(), rec.Labels) {
			continue
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id: rec.ID,
			Metadata: &runtimeapi.PodSandboxMetadata{
				Name: rec.Metadata.Name, Namespace: rec.Metadata.Namespace,
				Uid: rec.Metadata.UID, Attempt: rec.Metadata.Attempt,
			},
			State:          state,
			CreatedAt:      rec.CreatedAt.UnixNano(),
			Labels:         rec.Labels,
			Annotations:    rec.Annotations,
			RuntimeHandler: rec.RuntimeHandler,
		})
	}
	return resp, nil
}

func matchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
