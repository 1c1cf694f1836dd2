// Package grpcserver is the gRPC side of podbayd's CRI server: the unary
// interceptor every RPC runs through (its logger fields, metrics, trace
// span, panic recovery, and the mapping of error classes to gRPC codes),
// the RPCs' tracing, and ExecSync's codec.
package grpcserver

import (
	"context"
	"fmt"
	"path"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
)

// Interceptor is the one place where every RPC gets its logger fields,
// its metrics and trace span, panic recovery, and the mapping of error
// classes to gRPC codes.
type Interceptor struct {
	metrics *metrics.Metrics
	tracer  trace.Tracer // nil: tracing is off
}

// NewInterceptor returns the interceptor that records to m and traces
// with tp (nil: tracing off).
func NewInterceptor(m *metrics.Metrics, tp trace.TracerProvider) *Interceptor {
	i := &Interceptor{metrics: m}
	if tp != nil {
		i.tracer = tp.Tracer(TracerName)
	}
	return i
}

// Unary is the grpc.UnaryServerInterceptor.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	method := path.Base(info.FullMethod)
	args := []any{"rpc", method}
	if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
		args = append(args, "pod", r.GetPodSandboxId())
	}
	if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
		args = append(args, "container", r.GetContainerId())
	}
	ctx, endSpan := i.traceRPC(ctx, info.FullMethod, req)
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
		i.metrics.ObserveRPC(method, code.String(), time.Since(start))
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
