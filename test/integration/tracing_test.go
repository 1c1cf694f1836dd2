package integration

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// collector is an OTLP/gRPC trace collector on a loopback port, holding
// every span exported to it.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool // the service.name of every resource
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: l.Addr().String(), services: map[string]bool{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return c
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		if v, ok := attrValue(rs.GetResource().GetAttributes(), "service.name"); ok {
			c.services[v.GetStringValue()] = true
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) serviceNames() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.services)
}

func (c *collector) all() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

// rpc returns the spans of RPC method ("RuntimeService/RunPodSandbox").
func (c *collector) rpc(method string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range c.all() {
		if s.GetName() == "runtime.v1."+method {
			out = append(out, s)
		}
	}
	return out
}

// children are the names of the spans whose parent is s.
func (c *collector) children(s *tracepb.Span) []string {
	var names []string
	for _, o := range c.all() {
		if string(o.GetParentSpanId()) == string(s.GetSpanId()) {
			names = append(names, o.GetName())
		}
	}
	return names
}

func attrValue(attrs []*commonpb.KeyValue, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return nil, false
}

func spanNamesOf(spans []*tracepb.Span) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.GetName())
	}
	return names
}

func tracingConfig(endpoint string, rate float64) string {
	return fmt.Sprintf("[tracing]\nendpoint = %q\nsampling_rate = %v\n", endpoint, rate)
}

// podLifecycle runs a pod with a container, and stops and removes both.
func podLifecycle(t *testing.T, e *env, ti testImages) (podID, ctrID string) {
	t.Helper()
	pod := e.runTestPod(t, "traced")
	ctrID = e.createContainer(t, pod, containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "1000")))
	e.startContainer(t, ctrID)
	e.stopContainer(t, ctrID, 0)
	e.removeContainer(t, ctrID)
	e.stopAndRemove(t, pod.id)
	return pod.id, ctrID
}

// TestTracingExportsRPCSpans: with [tracing] endpoint set, podbayd exports
// a span for each CRI RPC, with the phases of the sandbox and container
// RPCs as its children, to an OTLP/gRPC collector; the spans queued at a
// SIGTERM are flushed before the daemon exits.
func TestTracingExportsRPCSpans(t *testing.T) {
	col := startCollector(t)
	e, ti := newContainerEnvWith(t, envOptions{tablesConfig: tracingConfig(col.addr, 1.0)}, "busybox")
	podID, ctrID := podLifecycle(t, e, ti)

	// An RPC that carries its caller's trace context joins that trace.
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(rpcCtx(t), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := e.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	e.stop() // flushes the spans still queued

	if services := col.serviceNames(); !services["podbayd"] {
		t.Errorf("no spans of service podbayd; services %v", services)
	}
	// An oci handler overlaps CNI with the root filesystem, bundle and
	// runtime's create (Run) and
	// with its kill and delete of the pause container (Stop), each pair
	// one phase, so that its Remove deletes no container; a vm handler
	// keeps them apart and deletes the pause container in Remove.
	// An oci handler's pod with pid: CONTAINER has no pause container:
	// Run pins its namespaces after CNI (pins), with no image, root
	// filesystem or runtime.
	runNet := []string{"sandbox.run.pause_image", "sandbox.run.rootfs", "sandbox.run.cni", "sandbox.run.runtime_create", "sandbox.run.runtime_start"}
	stopNet := []string{"sandbox.stop.cni", "sandbox.stop.netns", "sandbox.stop.runtime_stop"}
	remove := []string{"sandbox.remove.runtime_delete", "sandbox.remove.rootfs", "sandbox.remove.netns"}
	if suiteRuntimeType != "vm" {
		runNet = []string{"sandbox.run.cni", "sandbox.run.pins"}
		stopNet = []string{"sandbox.stop.network_and_kill"}
		remove = []string{"sandbox.remove.netns"}
	}
	for _, tc := range []struct {
		method string
		id     string // the object attribute's value
		attr   string
		want   []string // among the span's children
	}{
		{"ImageService/PullImage", ti.ref("busybox"), "cri.image", nil},
		{"RuntimeService/RunPodSandbox", podID, "cri.pod_sandbox_id", append([]string{
			"sandbox.run.netns", "sandbox.run.persist"}, runNet...)},
		{"RuntimeService/CreateContainer", ctrID, "cri.container_id", []string{
			"container.create.rootfs", "container.create.spec", "container.create.runtime_create", "container.create.persist"}},
		{"RuntimeService/StartContainer", ctrID, "cri.container_id", []string{"container.start.runtime_start"}},
		{"RuntimeService/StopContainer", ctrID, "cri.container_id", []string{"container.stop.runtime_stop"}},
		{"RuntimeService/RemoveContainer", ctrID, "cri.container_id", []string{"container.remove.monitor", "container.remove.unpublish"}},
		{"RuntimeService/StopPodSandbox", podID, "cri.pod_sandbox_id", stopNet},
		{"RuntimeService/RemovePodSandbox", podID, "cri.pod_sandbox_id", remove},
	} {
		spans := col.rpc(tc.method)
		if len(spans) == 0 {
			t.Errorf("no %s span; got %v", tc.method, spanNamesOf(col.all()))
			continue
		}
		var s *tracepb.Span
		for _, c := range spans {
			if v, ok := attrValue(c.GetAttributes(), tc.attr); ok && v.GetStringValue() == tc.id {
				s = c
			}
		}
		if s == nil {
			t.Errorf("no %s span with %s=%s", tc.method, tc.attr, tc.id)
			continue
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER || s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("%s span: kind %v status %v", tc.method, s.GetKind(), s.GetStatus())
		}
		children := col.children(s)
		for _, name := range tc.want {
			if !slices.Contains(children, name) {
				t.Errorf("%s span: no child %s; children %v", tc.method, name, children)
			}
		}
	}

	version := col.rpc("RuntimeService/Version")
	joined := slices.ContainsFunc(version, func(s *tracepb.Span) bool {
		return fmt.Sprintf("%x", s.GetTraceId()) == traceID && fmt.Sprintf("%x", s.GetParentSpanId()) == parentID
	})
	if !joined {
		t.Errorf("no Version span in the caller's trace %s under %s (%d Version spans)", traceID, parentID, len(version))
	}

	// A failed RPC's span has an error status with the gRPC code.
	e.start("")
	if _, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nonexistent"}); err == nil {
		t.Fatal("status of an unknown pod succeeded")
	}
	e.stop()
	var failed *tracepb.Span
	for _, s := range col.rpc("RuntimeService/PodSandboxStatus") {
		if v, ok := attrValue(s.GetAttributes(), "cri.pod_sandbox_id"); ok && v.GetStringValue() == "nonexistent" {
			failed = s
		}
	}
	if failed == nil {
		t.Fatal("no span of the failed PodSandboxStatus")
	}
	code, _ := attrValue(failed.GetAttributes(), "rpc.grpc.status_code")
	if failed.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || code.GetIntValue() != 5 || !strings.HasPrefix(failed.GetStatus().GetMessage(), "NotFound") {
		t.Errorf("failed PodSandboxStatus span: status %v, rpc.grpc.status_code %v; want error, NotFound (5)", failed.GetStatus(), code)
	}
}

// TestTracingSamplingZero: with sampling_rate 0 no span reaches the
// collector, except under a caller's sampled trace context, which the
// parent-based sampler follows.
func TestTracingSamplingZero(t *testing.T) {
	col := startCollector(t)
	e, ti := newContainerEnvWith(t, envOptions{tablesConfig: tracingConfig(col.addr, 0)}, "busybox")
	podLifecycle(t, e, ti)
	e.stop()
	if spans := col.all(); len(spans) != 0 {
		t.Fatalf("sampling_rate 0 exported %d spans: %v", len(spans), spanNamesOf(spans))
	}

	e.start("")
	const traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(rpcCtx(t), "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if _, err := e.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	e.stop()
	spans := col.all()
	if len(spans) != 1 || spans[0].GetName() != "runtime.v1.RuntimeService/Version" || fmt.Sprintf("%x", spans[0].GetTraceId()) != traceID {
		t.Errorf("under a sampled parent, exported %v; want the one Version span in trace %s", spanNamesOf(spans), traceID)
	}
}

// TestTracingUnreachableCollector: a collector that is down neither keeps
// podbayd from serving nor holds up its shutdown past the bounded flush;
// the spans lost are logged.
func TestTracingUnreachableCollector(t *testing.T) {
	e := newEnv(t, envOptions{tablesConfig: tracingConfig(fmt.Sprintf("127.0.0.1:%d", freePort(t)), 1.0)})
	e.start("")
	id := e.runPod(t, e.podConfig("untraced"), "")
	e.stopAndRemove(t, id)
	start := time.Now()
	e.stop()
	// The flush is bounded by 5s; the rest of a shutdown takes well
	// under a second here.
	if d := time.Since(start); d > 12*time.Second {
		t.Errorf("podbayd took %v to stop with its collector down", d)
	}
	if log := e.logTail(50); !strings.Contains(log, "spans not flushed") {
		t.Errorf("no warning about the spans lost in the log:\n%s", log)
	}
}
