// Package metrics holds podbay's Prometheus collectors: per-RPC latency and
// errors, and the latency of each phase of the sandbox and container
// operations (netns, CNI, runtime create/start, ...), which is where a slow
// pod start is found. The Timer that measures the phases also traces each
// as a span under the RPC's.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
)

// Metrics is a set of collectors registered on their own registry.
type Metrics struct {
	Registry *prometheus.Registry

	rpcDuration *prometheus.HistogramVec
	rpcErrors   *prometheus.CounterVec
	phase       *prometheus.SummaryVec
	// containerPhase is phase for the container RPCs: a separate metric,
	// so the sandbox one keeps its meaning (podbay-bench reads it).
	containerPhase *prometheus.SummaryVec
}

// New creates and registers the collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "podbay_rpc_duration_seconds",
			Help:    "Latency of CRI RPCs.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"method"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podbay_rpc_errors_total",
			Help: "CRI RPCs that returned an error, by gRPC code.",
		}, []string{"method", "code"}),
		// A summary, like CRI-O's operation latencies: exact quantiles over a
		// sliding window, which is what a latency breakdown needs.
		phase: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name:       "podbay_sandbox_phase_duration_seconds",
			Help:       "Latency of each phase of RunPodSandbox, StopPodSandbox and RemovePodSandbox.",
			Objectives: map[float64]float64{0.5: 0.01, 0.95: 0.005, 0.99: 0.001},
			MaxAge:     10 * time.Minute,
		}, []string{"operation", "phase"}),
		containerPhase: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name:       "podbay_container_phase_duration_seconds",
			Help:       "Latency of each phase of CreateContainer, StartContainer, StopContainer and RemoveContainer.",
			Objectives: map[float64]float64{0.5: 0.01, 0.95: 0.005, 0.99: 0.001},
			MaxAge:     10 * time.Minute,
		}, []string{"operation", "phase"}),
	}
	m.Registry.MustRegister(m.rpcDuration, m.rpcErrors, m.phase, m.containerPhase,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRPC records one RPC.
func (m *Metrics) ObserveRPC(method, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.rpcDuration.WithLabelValues(method).Observe(d.Seconds())
	if code != "OK" {
		m.rpcErrors.WithLabelValues(method, code).Inc()
	}
}

// ObservePhase records one phase of a sandbox operation.
func (m *Metrics) ObservePhase(operation, phase string, d time.Duration) {
	if m == nil {
		return
	}
	m.phase.WithLabelValues(operation, phase).Observe(d.Seconds())
}

// Timer measures consecutive phases of one operation. Each phase is
// observed in a phase summary and, when the operation's context carries a
// recording span (the RPC's, see server.unaryInterceptor), also becomes a
// child span of it named <kind>.<operation>.<phase> ("sandbox.run.cni"):
// one call both times the phase and traces it.
type Timer struct {
	m         *Metrics
	vec       *prometheus.SummaryVec
	span      string // span name prefix, "sandbox.run."
	operation string
	last      time.Time
	ctx       context.Context
	tracer    trace.Tracer // nil: the context's span is not recording
}

// Start begins timing a sandbox operation's first phase; ctx carries the
// span the phases are traced under.
func (m *Metrics) Start(ctx context.Context, operation string) *Timer {
	return m.start(ctx, "sandbox", operation)
}

// StartContainer begins timing a container operation's first phase.
func (m *Metrics) StartContainer(ctx context.Context, operation string) *Timer {
	return m.start(ctx, "container", operation)
}

func (m *Metrics) start(ctx context.Context, kind, operation string) *Timer {
	t := &Timer{m: m, span: kind + "." + operation + ".", operation: operation, last: time.Now(), ctx: ctx}
	if m != nil {
		t.vec = m.phase
		if kind == "container" {
			t.vec = m.containerPhase
		}
	}
	// Not recording: tracing is off, or this trace is not sampled (the
	// sampler is parent-based, so no child would be either). Then a phase
	// costs no more than its metric.
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		t.tracer = span.TracerProvider().Tracer(tracerName)
	}
	return t
}

// tracerName is the instrumentation scope of the phase spans.
const tracerName = "github.com/podbay/podbay/internal/metrics"

// Phase records the time since the previous phase ended under name.
func (t *Timer) Phase(name string) {
	now := time.Now()
	if t.vec != nil {
		t.vec.WithLabelValues(t.operation, name).Observe(now.Sub(t.last).Seconds())
	}
	if t.tracer != nil {
		_, span := t.tracer.Start(t.ctx, t.span+name, trace.WithTimestamp(t.last))
		span.End(trace.WithTimestamp(now))
	}
	t.last = now
}
