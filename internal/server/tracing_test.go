package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/grpcserver"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/imageservice"
	"github.com/podbay/podbay/internal/log"
)

// newTracedEnv is newTestEnv with a server that traces into an in-memory
// exporter, each span exported as it ends.
func newTracedEnv(t *testing.T, sampler sdktrace.Sampler) (*testEnv, *tracetest.InMemoryExporter) {
	t.Helper()
	e := newTestEnv(t, "")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	e.srv.Shutdown(context.Background())
	streams, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{
		Config: e.cfg, DB: e.db, Network: e.net, NetNS: e.ns,
		Runtimes:       e.runtimes,
		Cgroups:        e.cg,
		Images:         e.img,
		PauseBinary:    "/nonexistent/podbay-pause",
		StreamListener: streams,
		TracerProvider: tp,
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeStreams() }()
	if err := srv.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-srv.Recovered()
	e.srv = srv
	return e, exp
}

// callIn is call with the client's context and the full gRPC method name.
func callIn[Req, Resp any](ctx context.Context, s *Server, fullMethod string, fn func(context.Context, Req) (Resp, error), req Req) (Resp, error) {
	resp, err := s.unaryInterceptor(ctx, req, &grpc.UnaryServerInfo{FullMethod: fullMethod}, func(ctx context.Context, r any) (any, error) {
		return fn(ctx, r.(Req))
	})
	var zero Resp
	if err != nil {
		return zero, err
	}
	return resp.(Resp), nil
}

// rpcSpan returns the one span of RPC method of the RuntimeService.
func rpcSpan(t *testing.T, exp *tracetest.InMemoryExporter, method string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "runtime.v1.RuntimeService/"+method || s.Name == "runtime.v1.ImageService/"+method {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans of %s, want 1; all: %v", len(found), method, spanNames(exp.GetSpans()))
	}
	return found[0]
}

// childNames are the names of parent's children, in the order they ended.
func childNames(exp *tracetest.InMemoryExporter, parent tracetest.SpanStub) []string {
	var names []string
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			names = append(names, s.Name)
		}
	}
	return names
}

func spanNames(spans tracetest.SpanStubs) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key attribute.Key, want any) {
	t.Helper()
	v, ok := attr(s, key)
	if !ok {
		t.Errorf("%s: no attribute %s; has %v", s.Name, key, s.Attributes)
		return
	}
	if got := v.AsInterface(); got != want {
		t.Errorf("%s: %s = %v (%T), want %v (%T)", s.Name, key, got, got, want, want)
	}
}

// A RunPodSandbox is one server span with its phases as children, in
// order, each within the RPC and each starting where the previous ended:
// the same phases the phase metric times. Stop and Remove likewise.
func TestTraceSandboxLifecycle(t *testing.T) {
	e, exp := newTracedEnv(t, sdktrace.AlwaysSample())
	id := e.mustRun(t, podConfig("traced"))

	run := rpcSpan(t, exp, "RunPodSandbox")
	if run.SpanKind != trace.SpanKindServer || run.Status.Code != otelcodes.Unset || run.Parent.IsValid() {
		t.Errorf("RunPodSandbox span: kind %v, status %v, parent %v; want a server root span without error", run.SpanKind, run.Status, run.Parent)
	}
	wantAttr(t, run, "rpc.system", "grpc")
	wantAttr(t, run, "rpc.service", "runtime.v1.RuntimeService")
	wantAttr(t, run, "rpc.method", "RunPodSandbox")
	wantAttr(t, run, "rpc.grpc.status_code", int64(0))
	wantAttr(t, run, grpcserver.AttrPodSandboxID, id)

	// An oci handler: CNI ADD and, beside it, the root filesystem, bundle
	// and runtime's create, one phase.
	want := []string{"sandbox.run.pause_image", "sandbox.run.prepare", "sandbox.run.netns",
		"sandbox.run.cni_and_create", "sandbox.run.runtime_start", "sandbox.run.persist"}
	if got := childNames(exp, run); !slices.Equal(got, want) {
		t.Fatalf("RunPodSandbox's children:\n got %v\nwant %v", got, want)
	}
	var prev tracetest.SpanStub
	for i, s := range exp.GetSpans() {
		if s.Parent.SpanID() != run.SpanContext.SpanID() {
			continue
		}
		if s.SpanContext.TraceID() != run.SpanContext.TraceID() {
			t.Errorf("%s is in trace %s, not the RPC's", s.Name, s.SpanContext.TraceID())
		}
		if s.StartTime.Before(run.StartTime) || s.EndTime.After(run.EndTime) || s.EndTime.Before(s.StartTime) {
			t.Errorf("%s [%v, %v] is not within RunPodSandbox [%v, %v]", s.Name, s.StartTime, s.EndTime, run.StartTime, run.EndTime)
		}
		if i > 0 && prev.Name != "" && !s.StartTime.Equal(prev.EndTime) {
			t.Errorf("%s starts at %v, not where %s ended (%v)", s.Name, s.StartTime, prev.Name, prev.EndTime)
		}
		prev = s
	}

	exp.Reset()
	if err := e.stopPod(id); err != nil {
		t.Fatal(err)
	}
	stop := rpcSpan(t, exp, "StopPodSandbox")
	wantAttr(t, stop, grpcserver.AttrPodSandboxID, id)
	want = []string{"sandbox.stop.containers", "sandbox.stop.network_and_kill", "sandbox.stop.persist"}
	if got := childNames(exp, stop); !slices.Equal(got, want) {
		t.Errorf("StopPodSandbox's children:\n got %v\nwant %v", got, want)
	}

	exp.Reset()
	if _, err := call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	remove := rpcSpan(t, exp, "RemovePodSandbox")
	// Stopped already: of the stop, only the check of the pod's containers
	// (the removal's phase is not "stopped"). The Stop deleted the pause
	// container (an oci handler's), so the removal deletes none.
	want = []string{"sandbox.stop.containers", "sandbox.remove.containers", "sandbox.remove.netns", "sandbox.remove.persist"}
	if got := childNames(exp, remove); !slices.Equal(got, want) {
		t.Errorf("RemovePodSandbox's children:\n got %v\nwant %v", got, want)
	}
}

// The container RPCs' phases are children of their spans; a container
// stopped with its pod has its stop phases under StopPodSandbox.
func TestTraceContainerLifecycle(t *testing.T) {
	e, exp := newTracedEnv(t, sdktrace.AlwaysSample())
	pod := e.podWithImage(t, "traced")
	id := e.mustCreate(t, pod, containerConfig("c"))
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	if err := e.removeContainer(id); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		want   []string
	}{
		{"CreateContainer", []string{"container.create.prepare", "container.create.rootfs", "container.create.spec", "container.create.runtime_create", "container.create.persist"}},
		{"StartContainer", []string{"container.start.runtime_start", "container.start.persist"}},
		{"StopContainer", []string{"container.stop.runtime_stop", "container.stop.persist"}},
		// Stopped already: no stop phases.
		// The release of its resources is finished in the background.
		{"RemoveContainer", []string{"container.remove.monitor", "container.remove.unpublish"}},
	} {
		s := rpcSpan(t, exp, tc.method)
		// CreateContainer's from its response, the others' from the request.
		wantAttr(t, s, grpcserver.AttrContainerID, id)
		// The background's spans may end after the check.
		got := slices.DeleteFunc(childNames(exp, s), func(n string) bool { return strings.HasPrefix(n, "container.remove_background.") })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s's children:\n got %v\nwant %v", tc.method, got, tc.want)
		}
	}

	// A running container is stopped by StopPodSandbox, under its span.
	id = e.mustCreate(t, pod, containerConfig("d"))
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	exp.Reset()
	if err := e.stopPod(pod); err != nil {
		t.Fatal(err)
	}
	stop := rpcSpan(t, exp, "StopPodSandbox")
	want := []string{"container.stop.runtime_stop", "container.stop.persist", "sandbox.stop.containers",
		"sandbox.stop.network_and_kill", "sandbox.stop.persist"}
	if got := childNames(exp, stop); !slices.Equal(got, want) {
		t.Errorf("StopPodSandbox's children:\n got %v\nwant %v", got, want)
	}
}

// A failed RPC's span has an error status with the gRPC code, and the
// phases done before the failure.
func TestTraceErrors(t *testing.T) {
	e, exp := newTracedEnv(t, sdktrace.AlwaysSample())
	e.rt.failOn("create", errors.New("runc create: boom"))
	if _, err := e.run(t, podConfig("failing")); err == nil {
		t.Fatal("RunPodSandbox succeeded with a failing runtime")
	}
	run := rpcSpan(t, exp, "RunPodSandbox")
	if run.Status.Code != otelcodes.Error || !strings.Contains(run.Status.Description, "boom") {
		t.Errorf("failed RunPodSandbox's status: %+v, want Error with the message", run.Status)
	}
	v, _ := attr(run, "rpc.grpc.status_code")
	if v.AsInt64() == 0 {
		t.Errorf("failed RunPodSandbox: rpc.grpc.status_code %v", v.AsInterface())
	}
	if _, ok := attr(run, grpcserver.AttrPodSandboxID); ok {
		t.Error("a failed RunPodSandbox names a pod")
	}
	got := childNames(exp, run)
	if !slices.Contains(got, "sandbox.run.netns") || slices.Contains(got, "sandbox.run.cni_and_create") {
		t.Errorf("failed RunPodSandbox's children %v: want the phases up to netns, not cni_and_create", got)
	}

	exp.Reset()
	_, err := call(e.srv, "ContainerStatus", e.srv.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	if err == nil {
		t.Fatal("ContainerStatus of an unknown container succeeded")
	}
	st := rpcSpan(t, exp, "ContainerStatus")
	wantAttr(t, st, "rpc.grpc.status_code", int64(codes.NotFound))
	if st.Status.Code != otelcodes.Error || !strings.HasPrefix(st.Status.Description, "NotFound: ") {
		t.Errorf("ContainerStatus of an unknown container: status %+v, want Error \"NotFound: ...\"", st.Status)
	}
}

// An RPC that carries the kubelet's trace context joins its trace, and its
// log lines carry the trace ID; an unsampled context is not recorded.
func TestTraceParentFromMetadata(t *testing.T) {
	e, exp := newTracedEnv(t, sdktrace.ParentBased(sdktrace.NeverSample()))
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := log.WithLogger(context.Background(), logger)
	sampled := metadata.NewIncomingContext(ctx, metadata.Pairs("traceparent", "00-"+traceID+"-"+spanID+"-01"))
	if _, err := callIn(sampled, e.srv, "/runtime.v1.RuntimeService/Version", e.srv.Version, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	v := rpcSpan(t, exp, "Version")
	if v.SpanContext.TraceID().String() != traceID || v.Parent.SpanID().String() != spanID || !v.Parent.IsRemote() {
		t.Errorf("Version span: trace %s parent %s (remote %v), want trace %s parent %s", v.SpanContext.TraceID(), v.Parent.SpanID(), v.Parent.IsRemote(), traceID, spanID)
	}
	if !strings.Contains(buf.String(), "trace_id="+traceID) {
		t.Errorf("the RPC's log lines do not carry its trace ID:\n%s", buf.String())
	}

	exp.Reset()
	buf.Reset()
	unsampled := metadata.NewIncomingContext(ctx, metadata.Pairs("traceparent", "00-"+traceID+"-"+spanID+"-00"))
	if _, err := callIn(unsampled, e.srv, "/runtime.v1.RuntimeService/Version", e.srv.Version, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	// And no parent at all: the root sampler (never) decides.
	if _, err := callIn(ctx, e.srv, "/runtime.v1.RuntimeService/Version", e.srv.Version, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("unsampled RPCs recorded spans: %v", spanNames(spans))
	}
	if strings.Contains(buf.String(), "trace_id") {
		t.Errorf("unsampled RPCs' log lines carry a trace ID:\n%s", buf.String())
	}
}

// Sampling rate 0 records nothing, phases included, and changes nothing
// else.
func TestTraceSamplingZero(t *testing.T) {
	e, exp := newTracedEnv(t, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0)))
	id := e.mustRun(t, podConfig("unsampled"))
	if err := e.stopPod(id); err != nil {
		t.Fatal(err)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("sampling rate 0 recorded spans: %v", spanNames(spans))
	}
}

// PullImage's span names the reference pulled and the image it got.
func TestTracePullImage(t *testing.T) {
	e, exp := newTracedEnv(t, sdktrace.AlwaysSample())
	const digest = "2222222222222222222222222222222222222222222222222222222222222222"
	e.img.registry["nginx:1"] = &image.Image{ID: digest, RepoTags: []string{"nginx:1"}}
	is := imageservice.New(imageservice.Options{Store: e.img})
	if _, err := callIn(context.Background(), e.srv, "/runtime.v1.ImageService/PullImage", is.PullImage,
		&runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "nginx:1"}}); err != nil {
		t.Fatal(err)
	}
	pull := rpcSpan(t, exp, "PullImage")
	wantAttr(t, pull, "rpc.service", "runtime.v1.ImageService")
	wantAttr(t, pull, grpcserver.AttrImage, "nginx:1")
	wantAttr(t, pull, grpcserver.AttrImageRef, "sha256:"+digest)

	exp.Reset()
	if _, err := callIn(context.Background(), e.srv, "/runtime.v1.ImageService/PullImage", is.PullImage,
		&runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "missing:1"}}); err == nil {
		t.Fatal("pulling an unknown image succeeded")
	}
	pull = rpcSpan(t, exp, "PullImage")
	wantAttr(t, pull, grpcserver.AttrImage, "missing:1")
	if pull.Status.Code != otelcodes.Error {
		t.Errorf("failed pull: status %+v", pull.Status)
	}
}
