package image

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/pullprogress"
)

// Live pull progress (issue 33): every pull in flight is tracked, per
// layer, from its manifest to its last commit, so that `podbay pulls`,
// the metrics and the log can say how far it is, how fast it goes and
// whether it is stalled. The CRI has no RPC for it (KEP-5334 asked for
// one and stalled); pullprogress.Pull and pullprogress.Layer are shaped as the
// messages such an RPC would return (docs/design.md, *Pull progress*).
//
// The figures of a layer are atomic counters its download updates on
// every Read, without a lock or an allocation; a snapshot reads them.

var layerStateNames = [...]string{pullprogress.LayerWaiting, pullprogress.LayerFetching, pullprogress.LayerUnpacking, pullprogress.LayerStaged,
	pullprogress.LayerCommitting, pullprogress.LayerDone, pullprogress.LayerExists, pullprogress.LayerFailed}

// layerState indexes layerStateNames.
type layerState int32

const (
	stateWaiting layerState = iota
	stateFetching
	stateUnpacking
	stateStaged
	stateCommitting
	stateDone
	stateExists
	stateFailed
)

func (s layerState) terminal() bool { return s >= stateDone }

// Tracking parameters.
const (
	// rateWindow is the span a layer's rate is averaged over.
	rateWindow = 5 * time.Second
	// sampleEvery is how often a layer's fetched count is sampled for its
	// rate (at most: a sample is taken by a Read).
	sampleEvery = time.Second
	// rateSamples holds rateWindow of samples and some.
	rateSamples = 8
	// stallAfter: a layer that received nothing for this long is stalled
	// since its last byte.
	stallAfter = 5 * time.Second
	// keepFinished and keepFinishedFor bound the finished pulls kept for
	// `podbay pulls`: the last 16, each for a minute.
	keepFinished    = 16
	keepFinishedFor = time.Minute
	// maxListedInFlight bounds the pulls in flight a snapshot lists in
	// full, so that its answer stays well inside a gRPC client's 4 MiB
	// default (a pull of maxImageLayers layers is about 140 KB of JSON).
	maxListedInFlight = 16
	// progressLogEvery is how often a pull in flight is logged, from
	// this long after its start.
	progressLogEvery = 10 * time.Second
)

// progressTracker holds the pulls in flight and the ones finished lately.
type progressTracker struct {
	now      func() time.Time
	logEvery time.Duration
	keepFor  time.Duration
	mu       sync.Mutex
	inFlight []*trackedPull      // guarded by mu; oldest first
	finished []pullprogress.Pull // guarded by mu; oldest first, at most keepFinished
}

func newProgressTracker(now func() time.Time) *progressTracker {
	if now == nil {
		now = time.Now
	}
	return &progressTracker{now: now, logEvery: progressLogEvery, keepFor: keepFinishedFor}
}

// trackedPull is one pull in flight.
type trackedPull struct {
	tracker *progressTracker
	ref     string
	started time.Time
	logger  *slog.Logger

	mu        sync.Mutex
	candidate string        // guarded by mu
	engine    string        // guarded by mu
	layers    []*layerTrack // guarded by mu; the entries are updated without it
	stopLog   chan struct{} // closed by finish
}

// layerTrack is one layer of a pull in flight: atomic figures, updated by
// its download without a lock.
type layerTrack struct {
	now       func() time.Time
	digest    string
	mediaType string
	logger    *slog.Logger

	size     atomic.Int64
	fetched  atomic.Int64 // the most bytes any attempt received
	unpacked atomic.Int64 // the most bytes any attempt unpacked
	attempt  atomic.Int64 // bytes the current attempt unpacked
	state    atomic.Int32 // a layerState
	started  atomic.Int64 // unix nanoseconds; 0: not begun
	lastByte atomic.Int64 // unix nanoseconds of the last byte received
	finished atomic.Int64 // unix nanoseconds
	sampled  atomic.Int64 // unix nanoseconds of the last rate sample

	samplesMu sync.Mutex
	samples   [rateSamples]rateSample // guarded by samplesMu; a ring
	next      int                     // guarded by samplesMu
}

type rateSample struct {
	at      int64 // unix nanoseconds; 0: empty
	fetched int64
}

// begin tracks a new pull of ref, logged every logEvery while it runs
// (from logEvery after its start) through ctx's logger. finish ends it.
func (t *progressTracker) begin(ctx context.Context, ref string) *trackedPull {
	if t == nil {
		return nil // a Store not made by New
	}
	p := &trackedPull{tracker: t, ref: ref, started: t.now(), logger: log.G(ctx), stopLog: make(chan struct{})}
	t.mu.Lock()
	t.inFlight = append(t.inFlight, p)
	t.mu.Unlock()
	if t.logEvery > 0 {
		go p.logWhileRunning(t.logEvery)
	}
	return p
}

// finish ends p with the pull's outcome: p moves to the finished pulls,
// its figures frozen. A successful pull's remaining layers (copy.Image's,
// committed with the image) are done; a failed one's begun layers, which
// it dropped, failed.
func (p *trackedPull) finish(err error) {
	if p == nil {
		return
	}
	close(p.stopLog)
	for _, l := range p.layerList() {
		switch state := layerState(l.state.Load()); {
		case state.terminal():
		case err == nil:
			l.done()
		case state != stateWaiting:
			l.staged(err)
		}
	}
	t := p.tracker
	snap := p.snapshot(t.now())
	snap.FinishedAt = t.now()
	snap.State, snap.StalledSince, snap.RateBytesPerSecond = pullprogress.PullDone, time.Time{}, 0
	if err != nil {
		snap.State, snap.Error = pullprogress.PullFailed, err.Error()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, q := range t.inFlight {
		if q == p {
			t.inFlight = append(t.inFlight[:i], t.inFlight[i+1:]...)
			break
		}
	}
	t.finished = append(t.finished, snap)
	t.pruneLocked(snap.FinishedAt)
}

// pruneLocked drops finished pulls beyond keepFinished or older than
// keepFor.
func (t *progressTracker) pruneLocked(now time.Time) {
	drop := max(len(t.finished)-keepFinished, 0)
	for drop < len(t.finished) && now.Sub(t.finished[drop].FinishedAt) > t.keepFor {
		drop++
	}
	if drop > 0 {
		t.finished = append(t.finished[:0], t.finished[drop:]...)
	}
}

// Pulls returns the pulls in flight and the ones finished in the last
// minute (at most 16). Its cost is proportional to the layers in flight;
// nothing is computed between calls.
func (s *Store) Pulls() pullprogress.Snapshot { return s.progress.snapshot() }

func (t *progressTracker) snapshot() pullprogress.Snapshot {
	if t == nil {
		return pullprogress.Snapshot{Time: time.Now()}
	}
	now := t.now()
	t.mu.Lock()
	t.pruneLocked(now)
	inFlight := append([]*trackedPull(nil), t.inFlight...)
	finished := append([]pullprogress.Pull(nil), t.finished...)
	t.mu.Unlock()
	out := pullprogress.Snapshot{Time: now, Pulls: make([]pullprogress.Pull, 0, min(len(inFlight), maxListedInFlight)+len(finished))}
	if len(inFlight) > maxListedInFlight {
		out.OmittedInFlight = len(inFlight) - maxListedInFlight
		inFlight = inFlight[:maxListedInFlight]
	}
	for _, p := range inFlight {
		out.Pulls = append(out.Pulls, p.snapshot(now))
	}
	for i := len(finished) - 1; i >= 0; i-- {
		out.Pulls = append(out.Pulls, finished[i])
	}
	return out
}

// inFlightPulls is the pulls in flight, for the metrics.
func (t *progressTracker) inFlightPulls() []*trackedPull {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*trackedPull(nil), t.inFlight...)
}

// tryCandidate notes that named is being tried (the next short-name
// candidate starts afresh).
func (p *trackedPull) tryCandidate(named string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.candidate, p.engine, p.layers = named, "", nil
}

// onePassLayers starts tracking the one-pass pull's layers: each gets its
// entry (l.progress), those in storage already are pullprogress.LayerExists.
func (p *trackedPull) onePassLayers(layers []*onePassLayer) {
	if p == nil {
		return
	}
	tracks := make([]*layerTrack, len(layers))
	for i, l := range layers {
		tracks[i] = p.newLayer(l.blob.Digest.String(), l.blob.MediaType, l.blob.Size)
		if l.exists {
			tracks[i].state.Store(int32(stateExists))
		}
		l.progress = tracks[i]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.engine, p.layers = pullprogress.EngineOnePass, tracks
}

// copyEngine notes that copy.Image pulls the image: the one-pass layers
// are forgotten, and copy.Image's report its own (copyEvents).
func (p *trackedPull) copyEngine() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.engine, p.layers = pullprogress.EngineCopy, nil
}

func (p *trackedPull) newLayer(digest, mediaType string, size int64) *layerTrack {
	l := &layerTrack{now: p.tracker.now, digest: digest, mediaType: mediaType, logger: p.logger}
	if size < 0 {
		size = -1
	}
	l.size.Store(size)
	return l
}

func (p *trackedPull) layerList() []*layerTrack {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.layers
}

// begin notes that an attempt at the layer's download began.
func (l *layerTrack) begin() {
	if l == nil {
		return
	}
	now := l.now().UnixNano()
	l.started.CompareAndSwap(0, now)
	l.lastByte.Store(now)
	l.attempt.Store(0)
	l.state.Store(int32(stateFetching))
	l.samplesMu.Lock()
	l.pushSampleLocked(now, l.fetched.Load())
	l.samplesMu.Unlock()
	l.sampled.Store(now)
}

// setSize records the size the registry gave when the manifest gave none.
func (l *layerTrack) setSize(size int64) {
	if l != nil && size >= 0 {
		l.size.CompareAndSwap(-1, size)
	}
}

// fetched records a Read of n bytes that brought the attempt's count to
// total. All compressed bytes read: the layer is unpacking.
func (l *layerTrack) fetchedTo(n int, total int64) {
	if l == nil || n <= 0 {
		return
	}
	now := l.now().UnixNano()
	storeMax(&l.fetched, total)
	l.lastByte.Store(now)
	if now-l.sampled.Load() >= int64(sampleEvery) {
		l.samplesMu.Lock()
		l.pushSampleLocked(now, l.fetched.Load())
		l.samplesMu.Unlock()
		l.sampled.Store(now)
	}
	if size := l.size.Load(); size >= 0 && total >= size {
		l.state.CompareAndSwap(int32(stateFetching), int32(stateUnpacking))
	}
}

// Write counts decompressed bytes handed to the unpacker.
func (l *layerTrack) Write(p []byte) (int, error) {
	if l != nil {
		storeMax(&l.unpacked, l.attempt.Add(int64(len(p))))
	}
	return len(p), nil
}

// staged notes the end of the layer's download: staged, or failed.
func (l *layerTrack) staged(err error) {
	if l == nil {
		return
	}
	if err != nil {
		l.finished.Store(l.now().UnixNano())
		l.state.Store(int32(stateFailed))
		return
	}
	l.state.Store(int32(stateStaged))
}

// committing notes that the staged layer is being moved into storage.
func (l *layerTrack) committing() {
	if l != nil {
		l.state.Store(int32(stateCommitting))
	}
}

// done notes that the layer is in storage, and logs it.
func (l *layerTrack) done() {
	if l == nil {
		return
	}
	now := l.now()
	l.finished.Store(now.UnixNano())
	l.state.Store(int32(stateDone))
	var took time.Duration
	if s := l.started.Load(); s != 0 {
		took = now.Sub(time.Unix(0, s)).Round(time.Millisecond)
	}
	l.logger.Info("pulled layer", "digest", l.digest, "bytes", l.fetched.Load(), "unpacked", l.unpacked.Load(),
		"duration", took)
}

func (l *layerTrack) pushSampleLocked(at, fetched int64) {
	l.samples[l.next] = rateSample{at: at, fetched: fetched}
	l.next = (l.next + 1) % rateSamples
}

// storeMax raises v to n if n is larger.
func storeMax(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// snapshot reads p's figures at now.
func (p *trackedPull) snapshot(now time.Time) pullprogress.Pull {
	p.mu.Lock()
	out := pullprogress.Pull{ImageRef: p.ref, Candidate: p.candidate, Engine: p.engine, State: pullprogress.PullRunning, StartedAt: p.started}
	layers := p.layers
	p.mu.Unlock()
	out.Layers = make([]pullprogress.Layer, len(layers))
	var stalled time.Time
	fetching, stalledLayers, busy := 0, 0, false
	for i, l := range layers {
		lp := l.snapshot(now)
		out.Layers[i] = lp
		switch {
		case lp.State == pullprogress.LayerExists:
		case out.Size >= 0 && lp.Size >= 0:
			out.Size += lp.Size
		default:
			out.Size = -1
		}
		out.Fetched += lp.Fetched
		out.Unpacked += lp.Unpacked
		out.RateBytesPerSecond += lp.RateBytesPerSecond
		switch lp.State {
		case pullprogress.LayerDone, pullprogress.LayerExists:
			out.LayersDone++
		case pullprogress.LayerFetching:
			fetching++
			if !lp.StalledSince.IsZero() {
				stalledLayers++
				if lp.StalledSince.After(stalled) {
					stalled = lp.StalledSince
				}
			}
		case pullprogress.LayerUnpacking, pullprogress.LayerCommitting:
			busy = true
		}
	}
	switch {
	case fetching > 0 && stalledLayers == fetching && !busy:
		out.StalledSince = stalled
	case len(layers) == 0 && now.Sub(p.started) >= stallAfter:
		// Still at the manifest: nothing arrived since the start.
		out.StalledSince = p.started
	}
	return out
}

// snapshot reads l's figures at now.
func (l *layerTrack) snapshot(now time.Time) pullprogress.Layer {
	state := layerState(l.state.Load())
	out := pullprogress.Layer{Digest: l.digest, MediaType: l.mediaType, Size: l.size.Load(), Fetched: l.fetched.Load(),
		Unpacked: l.unpacked.Load(), State: layerStateNames[state]}
	if s := l.started.Load(); s != 0 {
		out.StartedAt = time.Unix(0, s)
	}
	if f := l.finished.Load(); f != 0 && state.terminal() {
		out.FinishedAt = time.Unix(0, f)
	}
	if state == stateFetching {
		if last := time.Unix(0, l.lastByte.Load()); now.Sub(last) >= stallAfter {
			out.StalledSince = last
		}
	}
	if state == stateFetching || state == stateUnpacking {
		out.RateBytesPerSecond = l.rate(now.UnixNano(), out.Fetched)
	}
	return out
}

// rate is the bytes a second received over the last rateWindow: from the
// oldest sample inside it to now.
func (l *layerTrack) rate(now, fetched int64) int64 {
	l.samplesMu.Lock()
	defer l.samplesMu.Unlock()
	var oldest rateSample
	for _, s := range l.samples {
		if s.at == 0 || now-s.at > int64(rateWindow) || now <= s.at {
			continue
		}
		if oldest.at == 0 || s.at < oldest.at {
			oldest = s
		}
	}
	if oldest.at == 0 {
		return 0
	}
	return int64(float64(fetched-oldest.fetched) / time.Duration(now-oldest.at).Seconds())
}

// logWhileRunning logs p every interval until it finishes, the first time
// interval after its start.
func (p *trackedPull) logWhileRunning(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-p.stopLog:
			return
		case <-tick.C:
			p.logProgress()
		}
	}
}

// logProgress logs one line of p's figures.
func (p *trackedPull) logProgress() {
	s := p.snapshot(p.tracker.now())
	args := []any{"ref", s.ImageRef, "fetched", s.Fetched, "size", s.Size, "unpacked", s.Unpacked,
		"rate_bytes_per_second", s.RateBytesPerSecond, "layers_done", s.LayersDone, "layers", len(s.Layers),
		"elapsed", p.tracker.now().Sub(s.StartedAt).Round(time.Second)}
	if !s.StalledSince.IsZero() {
		args = append(args, "stalled_since", s.StalledSince)
	}
	p.logger.Info("pull progress", args...)
}
