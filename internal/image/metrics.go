package image

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pullMetrics are the pull collectors; a nil *pullMetrics records nothing.
type pullMetrics struct {
	bytes    prometheus.Counter
	duration *prometheus.HistogramVec
}

func newPullMetrics(reg prometheus.Registerer) (*pullMetrics, error) {
	m := &pullMetrics{
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "podbay_image_pull_bytes_total",
			Help: "Bytes downloaded from registries by image pulls.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "podbay_image_pull_duration_seconds",
			Help:    "Duration of image pulls, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"outcome"}),
	}
	// A second store on the same registry (tests, a re-opened store)
	// shares the collectors already there.
	if err := reg.Register(m.bytes); err != nil {
		existing, ok := alreadyRegistered[prometheus.Counter](err)
		if !ok {
			return nil, fmt.Errorf("register image pull metrics: %w", err)
		}
		m.bytes = existing
	}
	if err := reg.Register(m.duration); err != nil {
		existing, ok := alreadyRegistered[*prometheus.HistogramVec](err)
		if !ok {
			return nil, fmt.Errorf("register image pull metrics: %w", err)
		}
		m.duration = existing
	}
	return m, nil
}

func alreadyRegistered[C prometheus.Collector](err error) (C, bool) {
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		c, ok := are.ExistingCollector.(C)
		return c, ok
	}
	var zero C
	return zero, false
}

func (m *pullMetrics) addBytes(n uint64) {
	if m == nil {
		return
	}
	m.bytes.Add(float64(n))
}

func (m *pullMetrics) observe(d time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "success"
	if err != nil {
		outcome = "failure"
	}
	m.duration.WithLabelValues(outcome).Observe(d.Seconds())
}
