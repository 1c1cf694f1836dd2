package metrics

import (
	"context"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// samples returns the sample count of metric by its operation and phase
// labels ("run/cni").
func samples(t *testing.T, m *Metrics, metric string) map[string]uint64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, s := range f.GetMetric() {
			out[label(s, "operation")+"/"+label(s, "phase")] = s.GetSummary().GetSampleCount()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A phase is one summary sample and, under a recording span, one child
// span covering exactly the phase.
func TestTimerPhasesAreSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ctx, rpc := tp.Tracer("test").Start(context.Background(), "rpc")

	m := New()
	timer := m.Start(ctx, "run")
	timer.Phase("netns")
	timer.Phase("cni")
	ct := m.StartContainer(ctx, "create")
	ct.Phase("rootfs")
	rpc.End()

	if got := samples(t, m, "podbay_sandbox_phase_duration_seconds"); got["run/netns"] != 1 || got["run/cni"] != 1 || len(got) != 2 {
		t.Errorf("sandbox phase samples %v", got)
	}
	if got := samples(t, m, "podbay_container_phase_duration_seconds"); got["create/rootfs"] != 1 || len(got) != 1 {
		t.Errorf("container phase samples %v", got)
	}
	spans := exp.GetSpans()
	var names []string
	for _, s := range spans[:len(spans)-1] {
		names = append(names, s.Name)
		if s.Parent.SpanID() != rpc.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the RPC's span", s.Name)
		}
	}
	if want := []string{"sandbox.run.netns", "sandbox.run.cni", "container.create.rootfs"}; !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	if !spans[1].StartTime.Equal(spans[0].EndTime) {
		t.Errorf("cni starts at %v, netns ended at %v", spans[1].StartTime, spans[0].EndTime)
	}
}

// Without a recording span (tracing off, or not sampled) a phase is its
// metric only; with neither metrics nor tracing it is nothing at all.
func TestTimerWithoutTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer tp.Shutdown(context.Background())
	unsampled, span := tp.Tracer("test").Start(context.Background(), "rpc")
	defer span.End()

	m := New()
	for _, ctx := range []context.Context{context.Background(), unsampled} {
		m.Start(ctx, "stop").Phase("cni")
	}
	if got := samples(t, m, "podbay_sandbox_phase_duration_seconds"); got["stop/cni"] != 2 {
		t.Errorf("sandbox phase samples %v", got)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("spans recorded: %v", spans)
	}
	var none *Metrics
	none.Start(context.Background(), "run").Phase("netns")
	none.StartContainer(context.Background(), "start").Phase("runtime_start")
}
