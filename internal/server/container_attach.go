package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
)

// Attach returns the URL of a session attached to a running container's
// stdio on the streaming server (streamRuntime.Attach).
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := validateStreams(req.GetStdin(), req.GetStdout(), req.GetStderr(), req.GetTty()); err != nil {
		return nil, err
	}
	if s.streams == nil {
		return nil, fmt.Errorf("streaming server is not running: %w", errdefs.ErrUnavailable)
	}
	c, err := s.runningContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	r := proto.CloneOf(req)
	r.ContainerId = c.ID
	return s.streams.GetAttach(r)
}
