package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/sandbox"
)

// PortForward returns the URL of a port-forward session into a ready pod
// on the streaming server; the client names the ports on each connection
// (streamRuntime.PortForward).
func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	for _, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, errInvalid(fmt.Sprintf("port %d is out of range", p))
		}
	}
	if s.streams == nil {
		return nil, fmt.Errorf("streaming server is not running: %w", errdefs.ErrUnavailable)
	}
	sb, err := s.readySandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	r := proto.CloneOf(req)
	r.PodSandboxId = sb.ID
	return s.streams.GetPortForward(r)
}

// readySandbox returns sandbox id (or unique prefix), which must be ready.
func (s *Server) readySandbox(id string) (*sandbox.Sandbox, error) {
	sb, err := s.index.Get(id)
	if err != nil {
		return nil, err
	}
	if st := sb.Phase(); st != sandbox.PhaseReady {
		return nil, fmt.Errorf("pod sandbox %s is %s, not ready: %w", sb.ID, st, errdefs.ErrFailedPrecondition)
	}
	return sb, nil
}
