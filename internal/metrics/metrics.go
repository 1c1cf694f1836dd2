// Package metrics holds podbay's Prometheus collectors: per-RPC latency and
// errors, and the latency of each phase of the sandbox operations (netns,
// CNI, runtime create/start, ...), which is where a slow pod start is found.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is a set of collectors registered on their own registry.
type Metrics struct {
	Registry *prometheus.Registry

	rpcDuration *prometheus.HistogramVec
	rpcErrors   *prometheus.CounterVec
	phase       *prometheus.SummaryVec
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
	}
	m.Registry.MustRegister(m.rpcDuration, m.rpcErrors, m.phase,
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

// Timer measures consecutive phases of one operation.
type Timer struct {
	m         *Metrics
	operation string
	last      time.Time
}

// Start begins timing an operation's first phase.
func (m *Metrics) Start(operation string) *Timer {
	return &Timer{m: m, operation: operation, last: time.Now()}
}

// Phase records the time since the previous phase ended under name.
func (t *Timer) Phase(name string) {
	now := time.Now()
	t.m.ObservePhase(t.operation, name, now.Sub(t.last))
	t.last = now
}
