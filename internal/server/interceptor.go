package server

import (
	"context"
	"fmt"
	"path"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// unaryInterceptor is the one place where every RPC gets its logger fields,
// its metrics and trace span, panic recovery, and the mapping of error
// classes to gRPC codes.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	method := path.Base(info.FullMethod)
	args := []any{"rpc", method}
	if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
		args = append(args, "pod", r.GetPodSandboxId())
	}
	if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
		args = append(args, "container", r.GetContainerId())
	}
	ctx, endSpan := s.traceRPC(ctx, info.FullMethod, req)
	defer func() { endSpan(resp, err) }() // after the mapping below
	ctx = log.With(ctx, args...)
	start := time.Now()

	defer func() {
		if p := recover(); p != nil {
			log.G(ctx).Error("panic in RPC", "panic", p, "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, fmt.Sprintf("internal error: %v", p))
		}
		err = errdefs.ToGRPC(err)
		code := status.Code(err)
		s.metrics.ObserveRPC(method, code.String(), time.Since(start))
		l := log.G(ctx)
		switch code {
		case codes.OK:
			l.Debug("rpc done", "duration", time.Since(start))
		case codes.NotFound, codes.Unimplemented:
			l.Debug("rpc failed", "code", code.String(), "err", err, "duration", time.Since(start))
		default:
			l.Error("rpc failed", "code", code.String(), "err", err, "duration", time.Since(start))
		}
	}()
	return handler(ctx, req)
}
