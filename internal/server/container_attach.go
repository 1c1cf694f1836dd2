package server

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Attach returns the URL of a session attached to a running container's
// stdio on the streaming server (streamRuntime.Attach).
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	c, err := s.streamTarget(req)
	if err != nil {
		return nil, err
	}
	r := proto.CloneOf(req)
	r.ContainerId = c.ID
	return s.streams.GetAttach(r)
}
