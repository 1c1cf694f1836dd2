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
	// phase is where a pull's time goes (pullPhases), and each layer's
	// in-process unpacking ("layer", "unpack").
	phase *prometheus.SummaryVec
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
		phase: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "podbay_image_phase_duration_seconds",
			Help: "Latency of each phase of a successful image pull (operation pull: resolve, manifest, " +
				"layers, commit, record) and of each layer's (operation layer: fetch, the registry's answer to its GET; " +
				"stage, its download, decompression and unpacking into a staging directory; unpack, the unpacking alone; " +
				"commit, moving the staged layer into storage).",
			Objectives: map[float64]float64{0.5: 0.01, 0.95: 0.005, 0.99: 0.001},
			MaxAge:     10 * time.Minute,
		}, []string{"operation", "phase"}),
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
	if err := reg.Register(m.phase); err != nil {
		existing, ok := alreadyRegistered[*prometheus.SummaryVec](err)
		if !ok {
			return nil, fmt.Errorf("register image pull metrics: %w", err)
		}
		m.phase = existing
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

func (m *pullMetrics) observePhase(operation, phase string, d time.Duration) {
	if m == nil {
		return
	}
	m.phase.WithLabelValues(operation, phase).Observe(d.Seconds())
}

// pullTimes are the moments of one successful pull that its phases lie
// between.
type pullTimes struct {
	start     time.Time // Pull began: candidates, registries.conf, policy
	copyStart time.Time // containers/image's copy began: manifest, policy check
	firstBlob time.Time // the first blob began downloading (or was found present); zero: none
	lastBlob  time.Time // the last blob was stored: downloaded, verified, its layer committed
	copyEnd   time.Time // the copy returned: the image record, its names and big data written
	end       time.Time // the Image was built from the record
}

// observePull records the phases of a successful pull: resolve (to the
// copy), manifest (to the first blob), layers (to the last blob stored;
// a layer is unpacked and committed as its download ends), commit (the
// image record) and record (reading it back for the CRI).
func (m *pullMetrics) observePull(t pullTimes) {
	if m == nil {
		return
	}
	m.observePhase("pull", "resolve", t.copyStart.Sub(t.start))
	if t.firstBlob.IsZero() {
		m.observePhase("pull", "manifest", t.copyEnd.Sub(t.copyStart))
	} else {
		m.observePhase("pull", "manifest", t.firstBlob.Sub(t.copyStart))
		m.observePhase("pull", "layers", t.lastBlob.Sub(t.firstBlob))
		m.observePhase("pull", "commit", t.copyEnd.Sub(t.lastBlob))
	}
	m.observePhase("pull", "record", t.end.Sub(t.copyEnd))
}
