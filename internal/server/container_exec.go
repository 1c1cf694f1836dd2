package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/oci"
	"github.com/podbay/podbay/internal/specgen"
)

// ExecSync runs a command in a running container and returns its output
// and exit code. A command that outlives the timeout is killed, with
// everything it started, and reported as exit code -1 with "command timed
// out" on stderr (CRI-O's answer; the kubelet's client turns a non-zero
// exit into a probe failure).
func (s *Server) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, errInvalid("exec command is required")
	}
	if req.GetTimeout() < 0 {
		return nil, errInvalid("exec timeout must not be negative")
	}
	// An empty program name or a NUL in an argument no runtime can exec.
	if err := specgen.CheckProcess(req.GetCmd(), nil, nil, ""); err != nil {
		return nil, err
	}
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	rec := c.Record()
	if rec.State != container.StateRunning {
		return nil, fmt.Errorf("container %s is not running: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return nil, err
	}
	res, err := rt.ExecSync(ctx, c.ID, oci.ExecOptions{
		Args:    req.GetCmd(),
		Timeout: time.Duration(req.GetTimeout()) * time.Second,
	})
	if err != nil {
		if errdefs.Code(err) == codes.Unknown && programRefused(err) {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
		return nil, err
	}
	stderr := res.Stderr
	if res.TimedOut {
		stderr = append(stderr, []byte(fmt.Sprintf("command timed out after %ds\n", req.GetTimeout()))...)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: stderr, ExitCode: res.ExitCode}, nil
}

// programRefused reports whether err is runc refusing to start the
// program an exec names, in the container as it is now (`exec: "x":
// executable file not found in $PATH`, a missing path, a directory): the
// request's fault, which only the container's filesystem can tell, as it
// is when the exec runs (found by TestCRIFuzz).
func programRefused(err error) bool {
	return strings.Contains(err.Error(), "unable to start container process: exec: \"")
}

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

// runningContainer returns container id (or unique prefix), which must be
// running.
func (s *Server) runningContainer(id string) (*container.Container, error) {
	c, err := s.containers.Get(id)
	if err != nil {
		return nil, err
	}
	if st := c.Record().State; st != container.StateRunning {
		return nil, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	return c, nil
}

// ReopenContainerLog makes conmon reopen the container's log file, after
// the kubelet rotated it.
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	rec := c.Record()
	if rec.State != container.StateRunning {
		return nil, fmt.Errorf("container %s is not running: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return nil, err
	}
	if err := rt.ReopenLog(ctx, c.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
