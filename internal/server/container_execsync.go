package server

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/specgen"
)

// maxLargeExecOutputs is how many ExecSyncs may hold more than a small
// output at once (runtime.OutputGate): their buffers take at most this
// many times runtime.MaxExecOutput. Others wait, their processes blocked
// on a full pipe, until a slot is free or their timeout expires.
const maxLargeExecOutputs = 8

// ExecSync runs a command in a running container and returns its output
// and exit code. stdout and stderr together keep runtime.MaxExecOutput
// bytes, the rest is discarded: the answer fits the kubelet's 16 MiB
// message limit. A command that outlives the timeout is killed, with
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
	c, rt, err := s.runningContainerRuntime(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	// The output counts against the gate until the answer is built; gRPC
	// then sends it (execSyncCodec: without a copy) as fast as the client
	// reads.
	out := runtime.NewExecOutput(s.execOutputs)
	defer out.Release()
	res, err := rt.ExecSync(ctx, c.ID, runtime.ExecOptions{
		Args:    req.GetCmd(),
		Timeout: time.Duration(req.GetTimeout()) * time.Second,
		Output:  out,
	})
	if err != nil {
		// The runtime classifies its refusal to start the program
		// (runtime.ClassifyExec): InvalidArgument.
		return nil, err
	}
	stderr := res.Stderr
	if res.TimedOut {
		// In place: a large output has room for it (runtime.NoteRoom),
		// and MaxExecOutput leaves room for it in the kubelet's limit.
		stderr = fmt.Appendf(stderr, "command timed out after %ds\n", req.GetTimeout())
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: stderr, ExitCode: res.ExitCode}, nil
}
