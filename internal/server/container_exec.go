package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
)

// Exec returns the URL of an interactive exec session in a running
// container on the streaming server; the command runs when the client
// connects (streamRuntime.Exec).
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, errInvalid("exec command is required")
	}
	c, err := s.streamTarget(req)
	if err != nil {
		return nil, err
	}
	// The session looks the container up again by its full ID.
	r := proto.CloneOf(req)
	r.ContainerId = c.ID
	return s.streams.GetExec(r)
}

// streamRequest is what Exec and Attach requests share.
type streamRequest interface {
	GetContainerId() string
	GetStdin() bool
	GetStdout() bool
	GetStderr() bool
	GetTty() bool
}

// streamTarget is the prologue of Exec and Attach: it checks req's
// streams (at least one is needed, and a terminal merges stderr into
// stdout, so tty with stderr is invalid: CRI api.proto), that the
// streaming server runs, and returns the container, which must be
// running.
func (s *Server) streamTarget(req streamRequest) (*container.Container, error) {
	if !req.GetStdin() && !req.GetStdout() && !req.GetStderr() {
		return nil, errInvalid("one of stdin, stdout and stderr must be set")
	}
	if req.GetTty() && req.GetStderr() {
		return nil, errInvalid("tty and stderr cannot both be set")
	}
	if s.streams == nil {
		return nil, fmt.Errorf("streaming server is not running: %w", errdefs.ErrUnavailable)
	}
	return s.runningContainer(req.GetContainerId())
}
