package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/pullprogress"
)

// fakeClock is the tracker's injected clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTestTracker is a tracker on clock that logs to buf and never on a
// timer.
func newTestTracker(clock *fakeClock, buf *bytes.Buffer) (*progressTracker, context.Context) {
	t := newProgressTracker(clock.Now)
	t.logEvery = 0
	ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(buf, nil)))
	return t, ctx
}

// testLayers are one-pass layers of the given sizes, the first present.
func testLayers(sizes ...int64) []*onePassLayer {
	var out []*onePassLayer
	for i, size := range sizes {
		out = append(out, &onePassLayer{index: i, exists: i == 0, blob: types.BlobInfo{
			Digest: digest.FromString(fmt.Sprint(i)), Size: size, MediaType: imgspecv1.MediaTypeImageLayerGzip}})
	}
	return out
}

// requireMonotonic checks that no figure of next went back from prev.
func requireMonotonic(t *testing.T, prev, next pullprogress.Pull) {
	t.Helper()
	if len(prev.Layers) > 0 && len(next.Layers) != len(prev.Layers) {
		t.Fatalf("pull went from %d layers to %d", len(prev.Layers), len(next.Layers))
	}
	if len(prev.Layers) == 0 {
		return // the manifest was not read yet
	}
	if next.Fetched < prev.Fetched || next.Unpacked < prev.Unpacked || next.LayersDone < prev.LayersDone {
		t.Fatalf("pull figures went back: %+v then %+v", prev, next)
	}
	for i := range prev.Layers {
		p, n := prev.Layers[i], next.Layers[i]
		if n.Fetched < p.Fetched || n.Unpacked < p.Unpacked || layerRank(n.State) < layerRank(p.State) {
			t.Fatalf("layer %d went back: %+v then %+v", i, p, n)
		}
	}
}

func layerRank(state string) int {
	for i, s := range layerStateNames {
		if s == state {
			return i
		}
	}
	return -1
}

// The figures of a pull rise monotonically through its layers' states and
// reach the totals; a retried download does not set them back; the
// finished pull is kept with them and each finished layer is logged.
func TestProgressMonotonicReachesTotals(t *testing.T) {
	clock := newFakeClock()
	var logs bytes.Buffer
	tr, ctx := newTestTracker(clock, &logs)
	p := tr.begin(ctx, "example.com/big:1")
	p.tryCandidate("example.com/big:1")
	layers := testLayers(100, 3000, 5000)
	p.onePassLayers(layers)
	prev := p.snapshot(clock.Now())
	if prev.Size != 8000 || prev.LayersDone != 1 || prev.Engine != pullprogress.EngineOnePass || prev.State != pullprogress.PullRunning {
		t.Fatalf("first snapshot %+v", prev)
	}
	step := func() {
		t.Helper()
		clock.advance(300 * time.Millisecond)
		next := p.snapshot(clock.Now())
		requireMonotonic(t, prev, next)
		prev = next
	}
	retried := false
	for _, l := range layers[1:] {
		l.progress.begin()
		step()
		var read int64
		for read < l.blob.Size {
			n := min(700, l.blob.Size-read)
			read += n
			l.progress.fetchedTo(int(n), read)
			_, _ = l.progress.Write(make([]byte, 2*n))
			step()
			if !retried && read == 1400 {
				retried = true
				// A retried download: its figures hold until it passes them.
				l.progress.begin()
				read = 0
			}
		}
		if got := layerStateNames[l.progress.state.Load()]; got != pullprogress.LayerUnpacking {
			t.Errorf("layer with every byte read is %s, want %s", got, pullprogress.LayerUnpacking)
		}
		l.progress.staged(nil)
		step()
	}
	for _, l := range layers[1:] {
		l.progress.committing()
		step()
		l.progress.done()
		step()
	}
	p.logProgress()
	if line := logs.String(); !strings.Contains(line, `msg="pull progress" ref=example.com/big:1 fetched=8000 size=8000`) ||
		!strings.Contains(line, "layers_done=3 layers=3") {
		t.Errorf("progress line not logged:\n%s", line)
	}
	p.finish(nil)
	snap := tr.snapshot()
	if len(snap.Pulls) != 1 {
		t.Fatalf("%d pulls after the end, want the finished one", len(snap.Pulls))
	}
	got := snap.Pulls[0]
	requireMonotonic(t, prev, got)
	if got.State != pullprogress.PullDone || got.Fetched != got.Size || got.Size != 8000 || got.LayersDone != 3 || got.FinishedAt.IsZero() {
		t.Errorf("finished pull %+v, want done with fetched = size = 8000, 3 layers done", got)
	}
	if got.Unpacked != 2*8000 {
		t.Errorf("unpacked %d, want 16000 (the retry counted once)", got.Unpacked)
	}
	for _, l := range got.Layers[1:] {
		if l.State != pullprogress.LayerDone || l.Fetched != l.Size || l.RateBytesPerSecond != 0 {
			t.Errorf("finished layer %+v", l)
		}
	}
	if n := strings.Count(logs.String(), `msg="pulled layer"`); n != 2 {
		t.Errorf("%d layer lines logged, want 2:\n%s", n, logs.String())
	}
}

// The rate is the bytes received over the last 5 s, and falls to 0 when
// nothing arrives.
func TestProgressRate(t *testing.T) {
	clock := newFakeClock()
	tr, ctx := newTestTracker(clock, &bytes.Buffer{})
	p := tr.begin(ctx, "r")
	layers := testLayers(0, 100<<20)
	p.onePassLayers(layers)
	l := layers[1].progress
	l.begin()
	var read int64
	for range 20 { // 10 s at 2 MiB/s, a Read every 250 ms
		clock.advance(250 * time.Millisecond)
		read += 512 << 10
		l.fetchedTo(512<<10, read)
	}
	if got := p.snapshot(clock.Now()).RateBytesPerSecond; got < 1900<<10 || got > 2100<<10 {
		t.Errorf("rate %d B/s, want about %d", got, 2<<20)
	}
	for range 4 { // then 1 MiB/s
		clock.advance(time.Second)
		read += 1 << 20
		l.fetchedTo(1<<20, read)
	}
	if got := p.snapshot(clock.Now()).RateBytesPerSecond; got < 1<<20 || got > 1300<<10 {
		t.Errorf("rate %d B/s after 4 s at 1 MiB/s, want a little over 1 MiB/s (the window's first second was faster)", got)
	}
	clock.advance(6 * time.Second)
	if got := p.snapshot(clock.Now()).RateBytesPerSecond; got != 0 {
		t.Errorf("rate %d B/s after 6 s without a byte, want 0", got)
	}
}

// A layer is stalled since its last byte once nothing came for 5 s; the
// pull is stalled when every downloading layer is and no other layer is
// unpacking or being committed.
func TestProgressStalledSince(t *testing.T) {
	clock := newFakeClock()
	tr, ctx := newTestTracker(clock, &bytes.Buffer{})
	p := tr.begin(ctx, "s")
	clock.advance(6 * time.Second)
	if got := p.snapshot(clock.Now()).StalledSince; !got.Equal(p.started) {
		t.Errorf("pull with no manifest after 6 s: stalled since %v, want its start %v", got, p.started)
	}
	layers := testLayers(0, 1000, 1000)
	p.onePassLayers(layers)
	a, b := layers[1].progress, layers[2].progress
	a.begin()
	b.begin()
	a.fetchedTo(10, 10)
	last := clock.Now()
	clock.advance(4 * time.Second)
	b.fetchedTo(10, 10)
	clock.advance(time.Second)
	s := p.snapshot(clock.Now())
	if !s.Layers[1].StalledSince.Equal(last) || !s.Layers[2].StalledSince.IsZero() || !s.StalledSince.IsZero() {
		t.Errorf("one layer quiet for 5 s, the other for 1 s: %v, %v, pull %v; want %v, none, none",
			s.Layers[1].StalledSince, s.Layers[2].StalledSince, s.StalledSince, last)
	}
	clock.advance(4 * time.Second)
	s = p.snapshot(clock.Now())
	if want := last.Add(4 * time.Second); !s.StalledSince.Equal(want) {
		t.Errorf("both quiet: pull stalled since %v, want the last byte %v", s.StalledSince, want)
	}
	b.fetchedTo(990, 1000) // b has it all and unpacks: the pull is busy
	clock.advance(5 * time.Second)
	if s = p.snapshot(clock.Now()); !s.StalledSince.IsZero() || s.Layers[1].StalledSince.IsZero() {
		t.Errorf("a layer unpacking: pull stalled since %v (want none), quiet layer since %v", s.StalledSince, s.Layers[1].StalledSince)
	}
}

// Finished pulls are kept, newest first, at most 16 and for a minute;
// pulls in flight come first, at most 16 of them listed.
func TestProgressKeepsFinishedBounded(t *testing.T) {
	clock := newFakeClock()
	tr, ctx := newTestTracker(clock, &bytes.Buffer{})
	for i := range 20 {
		p := tr.begin(ctx, fmt.Sprint("done", i))
		layers := testLayers(0, 10, 10)
		p.onePassLayers(layers)
		layers[1].progress.begin()
		clock.advance(time.Second)
		var err error
		if i == 19 {
			err = errors.New("registry said no")
		}
		p.finish(err)
	}
	for i := range 18 {
		tr.begin(ctx, fmt.Sprint("running", i))
	}
	s := tr.snapshot()
	if len(s.Pulls) != 32 || s.OmittedInFlight != 2 {
		t.Fatalf("%d pulls listed, %d omitted; want 16 in flight, 16 finished, 2 omitted", len(s.Pulls), s.OmittedInFlight)
	}
	if s.Pulls[0].ImageRef != "running0" || s.Pulls[0].State != pullprogress.PullRunning {
		t.Errorf("first listed %+v, want the oldest in flight", s.Pulls[0])
	}
	if f := s.Pulls[16]; f.ImageRef != "done19" || f.State != pullprogress.PullFailed || f.Error != "registry said no" ||
		f.Layers[1].State != pullprogress.LayerFailed || f.Layers[2].State != pullprogress.LayerWaiting {
		t.Errorf("first finished %+v, want the newest, failed with its error, its begun layer failed", f)
	}
	if f := s.Pulls[17]; f.State != pullprogress.PullDone || f.Layers[1].State != pullprogress.LayerDone {
		t.Errorf("second finished %+v, want done with its layers", f)
	}
	if f := s.Pulls[31]; f.ImageRef != "done4" {
		t.Errorf("last finished %s, want done4 (the last 16)", f.ImageRef)
	}
	clock.advance(48 * time.Second)
	s = tr.snapshot()
	if n := len(s.Pulls) - 16; n != 13 {
		t.Errorf("%d finished pulls kept 48 s later, want the 13 of the last minute", n)
	}
}

// copy.Image's events are tracked per layer, its config blob is not a
// layer, and the layers it downloaded are done when the pull is.
func TestProgressCopyEvents(t *testing.T) {
	clock := newFakeClock()
	tr, ctx := newTestTracker(clock, &bytes.Buffer{})
	p := tr.begin(ctx, "c")
	events := make(chan types.ProgressProperties)
	seen := make(chan int)
	go func() {
		n := 0
		for range events {
			n++
		}
		seen <- n
	}()
	in, stop := p.copyEvents(events)
	layer := types.BlobInfo{Digest: digest.FromString("l"), Size: 300, MediaType: imgspecv1.MediaTypeImageLayerGzip}
	present := types.BlobInfo{Digest: digest.FromString("p"), Size: 50, MediaType: imgspecv1.MediaTypeImageLayerGzip}
	config := types.BlobInfo{Digest: digest.FromString("c"), Size: 10, MediaType: imgspecv1.MediaTypeImageConfig}
	sent := []types.ProgressProperties{
		{Event: types.ProgressEventNewArtifact, Artifact: config},
		{Event: types.ProgressEventDone, Artifact: config, Offset: 10, OffsetUpdate: 10},
		{Event: types.ProgressEventSkipped, Artifact: present},
		{Event: types.ProgressEventNewArtifact, Artifact: layer},
		{Event: types.ProgressEventRead, Artifact: layer, Offset: 100, OffsetUpdate: 100},
	}
	for _, ev := range sent {
		in <- ev
	}
	in <- types.ProgressProperties{Event: types.ProgressEventDone, Artifact: layer, Offset: 300, OffsetUpdate: 200}
	stop()
	close(events)
	if n := <-seen; n != len(sent)+1 {
		t.Errorf("%d events passed on, want %d", n, len(sent)+1)
	}
	s := p.snapshot(clock.Now())
	if s.Engine != pullprogress.EngineCopy || len(s.Layers) != 2 || s.Layers[0].State != pullprogress.LayerExists ||
		s.Layers[1].State != pullprogress.LayerStaged || s.Layers[1].Fetched != 300 {
		t.Fatalf("copy pull %+v", s)
	}
	p.finish(nil)
	if got := tr.snapshot().Pulls[0]; got.LayersDone != 2 || got.Fetched != 300 {
		t.Errorf("finished copy pull %+v, want 2 layers done, 300 B fetched", got)
	}
}

// The gauges sum the pulls in flight, by layer state and figure, and
// forget a pull once it finished.
func TestProgressGauges(t *testing.T) {
	clock := newFakeClock()
	tr, ctx := newTestTracker(clock, &bytes.Buffer{})
	reg := prometheus.NewPedanticRegistry()
	if err := registerProgressCollector(reg, tr); err != nil {
		t.Fatal(err)
	}
	p := tr.begin(ctx, "g")
	layers := testLayers(10, 1000, 500)
	p.onePassLayers(layers)
	layers[1].progress.begin()
	layers[1].progress.fetchedTo(400, 400)
	_, _ = layers[1].progress.Write(make([]byte, 900))
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"podbay_image_pulls_in_flight", "", 1},
		{"podbay_image_pull_in_flight_bytes", "size", 1500},
		{"podbay_image_pull_in_flight_bytes", "fetched", 400},
		{"podbay_image_pull_in_flight_bytes", "unpacked", 900},
		{"podbay_image_pull_layers", "fetching", 1},
		{"podbay_image_pull_layers", "waiting", 1},
		{"podbay_image_pull_layers", "exists", 1},
	} {
		if got := gaugeValue(t, reg, c.name, c.label); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.label, got, c.want)
		}
	}
	p.finish(errors.New("gone"))
	if got := gaugeValue(t, reg, "podbay_image_pulls_in_flight", ""); got != 0 {
		t.Errorf("%v pulls in flight after the end, want 0", got)
	}
}

// gaugeValue is the value of name (with the label value label, if any) in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// BenchmarkLayerFetchedTo is the tracker's cost on every Read of a
// layer's blob and write of its decompressed stream.
func BenchmarkLayerFetchedTo(b *testing.B) {
	tr := newProgressTracker(nil)
	tr.logEvery = 0
	p := tr.begin(context.Background(), "bench")
	layers := testLayers(0, 1<<40)
	p.onePassLayers(layers)
	l := layers[1].progress
	l.begin()
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	var total int64
	for b.Loop() {
		total += int64(len(buf))
		l.fetchedTo(len(buf), total)
		_, _ = l.Write(buf)
	}
}
