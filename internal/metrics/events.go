package metrics

import "github.com/prometheus/client_golang/prometheus"

// ContainerEvents are the collectors of the CRI container event stream
// (GetContainerEvents). Its methods do nothing on a nil receiver.
type ContainerEvents struct {
	published   *prometheus.CounterVec
	subscribers prometheus.Gauge
	dropped     prometheus.Counter
}

// NewContainerEvents creates the event stream's collectors and registers
// them on m's registry; on a nil m it returns nil.
func (m *Metrics) NewContainerEvents() *ContainerEvents {
	if m == nil {
		return nil
	}
	e := &ContainerEvents{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podbay_container_events_total",
			Help: "Container and sandbox events published to GetContainerEvents subscribers, by type.",
		}, []string{"type"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podbay_container_events_subscribers",
			Help: "Current GetContainerEvents subscribers.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "podbay_container_events_dropped_subscribers_total",
			Help: "GetContainerEvents subscribers dropped (stream ended with ResourceExhausted) because they fell too far behind.",
		}),
	}
	m.Registry.MustRegister(e.published, e.subscribers, e.dropped)
	return e
}

// Published counts one event of the given type.
func (e *ContainerEvents) Published(eventType string) {
	if e != nil {
		e.published.WithLabelValues(eventType).Inc()
	}
}

// Subscribers sets the number of current subscribers.
func (e *ContainerEvents) Subscribers(n int) {
	if e != nil {
		e.subscribers.Set(float64(n))
	}
}

// Dropped counts one subscriber dropped for falling behind.
func (e *ContainerEvents) Dropped() {
	if e != nil {
		e.dropped.Inc()
	}
}
