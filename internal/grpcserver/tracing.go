package grpcserver

import (
	"context"
	"path"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	otelprop "go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/log"
)

// Tracing: the interceptor starts a span for every RPC (traceRPC), and the
// phases of the sandbox and container operations become its children
// through their metrics.Timer, which reads the span from the context. With
// tracing off the interceptor has no tracer and an RPC pays one nil check.

// TracerName is the instrumentation scope of the RPC spans (the server's,
// where they were made first).
const TracerName = "github.com/podbay/podbay/internal/server"

// Span attributes of podbay's own: the CRI object an RPC is about.
const (
	AttrPodSandboxID = attribute.Key("cri.pod_sandbox_id")
	AttrContainerID  = attribute.Key("cri.container_id")
	AttrImage        = attribute.Key("cri.image")
	AttrImageRef     = attribute.Key("cri.image_ref")
)

// endNothing is traceRPC's end function when tracing is off.
func endNothing(any, error) {}

// traceRPC starts the span of one RPC, named as its gRPC method without
// the leading slash ("runtime.v1.RuntimeService/RunPodSandbox"), as otelgrpc
// names them. When the request's metadata carries a W3C trace context (the
// kubelet's, with KubeletTracing), the span joins the caller's trace and
// follows its sampling decision. A sampled span's trace ID is added to the
// context's logger. end finishes the span with the RPC's response and its
// error, already mapped to a gRPC status.
func (i *Interceptor) traceRPC(ctx context.Context, fullMethod string, req any) (_ context.Context, end func(resp any, err error)) {
	if i.tracer == nil {
		return ctx, endNothing
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = otelprop.TraceContext{}.Extract(ctx, metadataCarrier(md))
	}
	name := strings.TrimPrefix(fullMethod, "/")
	service, method := path.Split(name)
	attrs := []attribute.KeyValue{
		semconv.RPCSystemGRPC,
		semconv.RPCService(strings.TrimSuffix(service, "/")),
		semconv.RPCMethod(method),
	}
	attrs = append(attrs, objectAttrs(req)...)
	ctx, span := i.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	if sc := span.SpanContext(); sc.IsSampled() {
		ctx = log.With(ctx, "trace_id", sc.TraceID().String())
	}
	return ctx, func(resp any, err error) {
		st := status.Convert(err)
		span.SetAttributes(semconv.RPCGRPCStatusCodeKey.Int(int(st.Code())))
		if err != nil {
			span.SetStatus(otelcodes.Error, st.Code().String()+": "+st.Message())
		} else {
			// What RunPodSandbox and CreateContainer made.
			span.SetAttributes(objectAttrs(resp)...)
		}
		span.End()
	}
}

// objectAttrs are the IDs of the pod, container and image a request or a
// response names: a PullImage span carries the reference pulled and the
// image ID it resolved to.
func objectAttrs(msg any) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if m, ok := msg.(interface{ GetImage() *runtimeapi.ImageSpec }); ok && m.GetImage().GetImage() != "" {
		attrs = append(attrs, AttrImage.String(m.GetImage().GetImage()))
	}
	if m, ok := msg.(interface{ GetImageRef() string }); ok && m.GetImageRef() != "" {
		attrs = append(attrs, AttrImageRef.String(m.GetImageRef()))
	}
	if m, ok := msg.(interface{ GetPodSandboxId() string }); ok && m.GetPodSandboxId() != "" {
		attrs = append(attrs, AttrPodSandboxID.String(m.GetPodSandboxId()))
	}
	if m, ok := msg.(interface{ GetContainerId() string }); ok && m.GetContainerId() != "" {
		attrs = append(attrs, AttrContainerID.String(m.GetContainerId()))
	}
	return attrs
}

// metadataCarrier reads a trace context from gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
