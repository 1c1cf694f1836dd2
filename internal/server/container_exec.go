package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
)

// Exec returns the URL of an interactive exec session in a running
// container on the streaming server; the command runs when the client
// connects (streamRuntime.Exec).
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, errInvalid("exec command is required")
	}
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
	// The session looks the container up again by its full ID.
	r := proto.CloneOf(req)
	r.ContainerId = c.ID
	return s.streams.GetExec(r)
}

// validateStreams checks the streams of an Exec or Attach request: at
// least one is needed, and a terminal merges stderr into stdout, so tty
// with stderr is invalid (CRI api.proto).
func validateStreams(stdin, stdout, stderr, tty bool) error {
	if !stdin && !stdout && !stderr {
		return errInvalid("one of stdin, stdout and stderr must be set")
	}
	if tty && stderr {
		return errInvalid("tty and stderr cannot both be set")
	}
	return nil
}
