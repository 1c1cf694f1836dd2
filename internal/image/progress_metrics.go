package image

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podbay/podbay/internal/pullprogress"
)

// progressCollector exports the pulls in flight as gauges, read from the
// tracker at each scrape. They are aggregates over every pull in flight,
// with no per-pull or per-layer label: references and digests are
// unbounded label values, each pull would leave a series behind, and a
// scrape every 15 s or more sees little of a pull anyway; `podbay pulls`
// has the per-pull figures.
type progressCollector struct {
	tracker atomic.Pointer[progressTracker]

	inFlight, stalled, rate *prometheus.Desc
	layers, bytes           *prometheus.Desc
}

func newProgressCollector() *progressCollector {
	return &progressCollector{
		inFlight: prometheus.NewDesc("podbay_image_pulls_in_flight", "Image pulls in flight.", nil, nil),
		stalled: prometheus.NewDesc("podbay_image_pulls_stalled",
			"Image pulls in flight whose every downloading layer received nothing for 5 s.", nil, nil),
		rate: prometheus.NewDesc("podbay_image_pull_rate_bytes_per_second",
			"Download rate of the image pulls in flight, summed, over the last 5 s.", nil, nil),
		layers: prometheus.NewDesc("podbay_image_pull_layers",
			"Layers of the image pulls in flight, by state (waiting, fetching, unpacking, staged, committing, done, exists, failed).",
			[]string{"state"}, nil),
		bytes: prometheus.NewDesc("podbay_image_pull_in_flight_bytes",
			"Bytes of the image pulls in flight, summed: size (compressed, from the manifests, of the layers to fetch; layers of unknown size count 0), "+
				"fetched (compressed, received) and unpacked (decompressed, handed to the unpacker).",
			[]string{"figure"}, nil),
	}
}

// registerProgressCollector registers the tracker's gauges; a second
// store on the same registry takes the collector over.
func registerProgressCollector(reg prometheus.Registerer, t *progressTracker) error {
	c := newProgressCollector()
	c.tracker.Store(t)
	if err := reg.Register(c); err != nil {
		existing, ok := alreadyRegistered[*progressCollector](err)
		if !ok {
			return fmt.Errorf("register image pull progress metrics: %w", err)
		}
		existing.tracker.Store(t)
	}
	return nil
}

func (c *progressCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.stalled, c.rate, c.layers, c.bytes} {
		ch <- d
	}
}

func (c *progressCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.tracker.Load()
	pulls := t.inFlightPulls()
	now := t.now()
	var stalled, rate, size, fetched, unpacked int64
	states := make([]int, len(layerStateNames))
	for _, p := range pulls {
		s := p.snapshot(now)
		if !s.StalledSince.IsZero() {
			stalled++
		}
		rate += s.RateBytesPerSecond
		fetched += s.Fetched
		unpacked += s.Unpacked
		for _, l := range s.Layers {
			if l.State != pullprogress.LayerExists {
				size += max(l.Size, 0)
			}
			for i, name := range layerStateNames {
				if name == l.State {
					states[i]++
				}
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(len(pulls)))
	ch <- prometheus.MustNewConstMetric(c.stalled, prometheus.GaugeValue, float64(stalled))
	ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, float64(rate))
	for i, name := range layerStateNames {
		ch <- prometheus.MustNewConstMetric(c.layers, prometheus.GaugeValue, float64(states[i]), name)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"size", size}, {"fetched", fetched}, {"unpacked", unpacked}} {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(f.v), f.name)
	}
}
