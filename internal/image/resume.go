package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"
	graphdriver "go.podman.io/storage/drivers"

	"github.com/podbay/podbay/internal/log"
)

// A layer's fetch within one pull (see partial.go for what is kept across
// pulls): a transient failure (a connection reset or cut short, a
// registry's 5xx, a network timeout) stages the layer again, after
// layerRetryBase, twice that, … up to layerAttempts attempts; each attempt
// reads what the partial file holds and fetches only the rest with a
// ranged GET. The unpack restarts from zero each time (the failed
// attempt's staging directory is removed): only network bytes are saved.
// A digest mismatch is not retried, unless the stream was resumed (the
// kept bytes may be what is wrong: they are dropped and the layer fetched
// once more from zero); neither are a cancelled pull and failures that
// are not the network's.
//
// containers/image's docker source reconnects by itself inside one GET
// (docker/body_reader.go): on a connection reset or an early EOF it asks
// for the rest with a Range, at most once a minute unless a MiB came
// since, and gives up on a 200, a wrong Content-Range or any error of the
// new request. That is kept, and is what this adds to: a later attempt, a
// later pull, a restarted daemon.

// layerAttempts bounds a layer's fetches within one pull.
const layerAttempts = 5

// defaultLayerRetryBase is the first wait before a layer's next attempt.
const defaultLayerRetryBase = time.Second

// rangeOverlap is how many bytes before its prefix's end a resumed fetch
// asks for again: the registry's answer must repeat them, or it did not
// start where it was asked to.
const rangeOverlap = 64 << 10

// rangeError is a registry's answer to a ranged GET that cannot be
// recombined with the bytes kept: the blob is fetched from zero instead.
type rangeError struct {
	offset int64
	reason string
}

func (e *rangeError) Error() string {
	return fmt.Sprintf("answer to a range request from byte %d refused: %s", e.offset, e.reason)
}

// stageWithRetries stages l, attempting again as the file's comment says;
// newDiffer gives each attempt its Differ.
func (s *Store) stageWithRetries(ctx context.Context, src types.ImageSource, l *onePassLayer,
	newDiffer func() *streamDiffer) (out *graphdriver.DriverWithDifferOutput, err error) {
	pf := s.partials.acquire(ctx, l.blob.Digest, l.blob.Size)
	defer func() {
		var digestErr *LayerDigestError
		pf.finish(ctx, err == nil || errors.As(err, &digestErr))
	}()
	noRange := false
	for attempt := 1; ; {
		var body *resumeBody
		body, err = s.openLayerBody(ctx, src, l, pf)
		if err == nil {
			if out, err = s.stageAttempt(ctx, l, newDiffer(), body); err == nil {
				return out, nil
			}
		}
		retry, fromZero, cause := retryDecision(ctx, err, body)
		if fromZero {
			log.G(ctx).Warn("layer download restarts from zero", "blob", l.blob.Digest, "err", cause)
			noRange = true
		}
		if !retry && !fromZero {
			return nil, err
		}
		if retry {
			if attempt >= layerAttempts {
				if cause != err {
					return nil, fmt.Errorf("layer %s, after %d attempts: %w (%v)", l.blob.Digest, attempt, cause, err)
				}
				return nil, fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			wait := s.layerRetryBase() << (attempt - 1)
			log.G(ctx).Info("layer download failed, retrying", "blob", l.blob.Digest, "attempt", attempt, "wait", wait, "err", cause)
			attempt++
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if pf != nil {
			pf.rewind(ctx, noRange)
		}
	}
}

func (s *Store) layerRetryBase() time.Duration {
	if s.retryBase > 0 {
		return s.retryBase
	}
	return defaultLayerRetryBase
}

// retryDecision classifies an attempt's failure err (body nil: the GET
// itself failed): retry is a transient failure, worth a new attempt;
// fromZero a prefix that did not verify, a range answer refused or a
// resumed stream whose digests do not match, which drop the kept bytes for an attempt from zero, not counted (it can
// happen once: the next has no prefix). cause is the stream's failure
// behind err when there is one.
func retryDecision(ctx context.Context, err error, body *resumeBody) (retry, fromZero bool, cause error) {
	var rangeErr *rangeError
	switch {
	case ctx.Err() != nil:
		return false, false, err
	case body == nil:
		return transientFetchError(err), false, err
	}
	off, bodyErr := body.state()
	if bodyErr == nil {
		bodyErr = err
	}
	switch {
	case body.prefix > 0 && (off < body.prefix || errors.Is(bodyErr, errPartialCorrupt)):
		// Whatever failed, a prefix not read to its end is not known good.
		return false, true, bodyErr
	case errors.As(bodyErr, &rangeErr):
		return false, true, bodyErr
	case bodyErr != err && transientFetchError(bodyErr):
		// Once the blob streams, only its stream's own failures are the
		// network's: a decompressor's unexpected EOF on a complete blob
		// is the image's.
		return true, false, bodyErr
	case body.prefix > 0:
		// A resumed stream that fails its digests or its decompression:
		// the kept bytes may be what is wrong (another mirror's, say).
		// Once more from zero, which decides.
		return false, true, err
	}
	return false, false, err
}

// transientFetchError reports a failure a new fetch may not have.
func transientFetchError(err error) bool {
	return err != nil && (isUnavailable(err) || errors.Is(err, io.ErrUnexpectedEOF))
}

// openLayerBody opens one attempt's stream of l's blob: from zero with
// GetBlob, or pf's prefix followed by a ranged GET of the rest.
func (s *Store) openLayerBody(ctx context.Context, src types.ImageSource, l *onePassLayer, pf *partialFile) (*resumeBody, error) {
	b := &resumeBody{pf: pf, size: l.blob.Size, blob: l.blob.Digest}
	if pf != nil {
		b.prefix = pf.prefixLen()
	}
	b.fetchFrom = func(ctx context.Context, offset int64) (io.ReadCloser, error) {
		return getBlobFrom(ctx, src, l.blob, offset)
	}
	b.ctx, b.cancel = context.WithCancel(ctx)
	if b.prefix > 0 {
		return b, nil
	}
	start := time.Now()
	rc, size, err := src.GetBlob(ctx, l.blob, none.NoCache)
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("fetch layer %s: %w", l.blob.Digest, err)
	}
	s.metrics.observePhase("layer", "fetch", time.Since(start))
	if l.blob.Size < 0 && size >= 0 {
		l.blob.Size, b.size = size, size
		l.progress.setSize(size)
	}
	b.net = rc
	return b, nil
}

// resumeBody is one attempt's stream of a blob: the partial file's prefix
// (hashed against its checkpoint as it is read), then the network's bytes,
// which are written to the partial file as they are read. A range
// answer of the wrong length is refused. Read is called by one goroutine at a time; Close by any.
type resumeBody struct {
	pf     *partialFile // nil: nothing kept
	prefix int64        // the partial file's bytes this attempt reads first
	size   int64        // the blob's size; -1 unknown
	blob   digest.Digest
	// fetchFrom opens a ranged GET of the blob from offset on.
	fetchFrom func(ctx context.Context, offset int64) (io.ReadCloser, error)
	ctx       context.Context
	cancel    context.CancelFunc

	ranged bool // the network stream is a range answer; set by network

	mu     sync.Mutex
	off    int64         // guarded by mu; bytes returned
	err    error         // guarded by mu; the first error a Read returned, but io.EOF
	net    io.ReadCloser // guarded by mu
	closed bool          // guarded by mu
}

func (b *resumeBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	off, closed := b.off, b.closed
	b.mu.Unlock()
	if closed {
		return 0, errLayerStreamClosed
	}
	n, err := b.read(p, off)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.off += int64(n)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// state returns how far the stream got and its first error.
func (b *resumeBody) state() (off int64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.off, b.err
}

func (b *resumeBody) read(p []byte, off int64) (int, error) {
	if off < b.prefix {
		return b.pf.readPrefix(p, off)
	}
	net, err := b.network(off)
	if err != nil {
		return 0, err
	}
	n, err := net.Read(p)
	end := off + int64(n)
	if b.size >= 0 && end > b.size {
		// More than the blob: a range answer is refused; a whole blob's
		// excess fails the size check at its end, as before.
		if b.ranged {
			n = int(b.size - off)
			err = &rangeError{offset: b.prefix, reason: "longer than the blob"}
		}
	}
	if n > 0 && b.pf != nil {
		b.pf.append(b.ctx, p[:n], off)
	}
	if err == io.EOF && b.ranged && end < b.size {
		return n, &rangeError{offset: b.prefix, reason: fmt.Sprintf("ended at byte %d of %d", end, b.size)}
	}
	// A whole blob that ends early: cut (Go's client reports an unexpected
	// EOF, transient) or complete but short (a clean EOF: the wrong blob,
	// which the size and digest checks at its end report).
	return n, err
}

// network returns the network stream, opening the ranged GET of the rest
// once the prefix is read: it asks from rangeOverlap bytes before, and the
// answer must repeat those.
func (b *resumeBody) network(off int64) (io.ReadCloser, error) {
	b.mu.Lock()
	net, closed := b.net, b.closed
	b.mu.Unlock()
	if closed {
		return nil, errLayerStreamClosed
	}
	if net != nil {
		return net, nil
	}
	from := max(off-rangeOverlap, 0)
	rc, err := b.fetchFrom(b.ctx, from)
	if err != nil {
		var rangeErr *rangeError
		if errors.As(err, &rangeErr) {
			return nil, err
		}
		return nil, fmt.Errorf("fetch layer %s from byte %d: %w", b.blob, from, err)
	}
	if err := b.checkOverlap(rc, from, off); err != nil {
		_ = rc.Close()
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_ = rc.Close()
		return nil, errLayerStreamClosed
	}
	b.net, b.ranged = rc, true
	return rc, nil
}

// checkOverlap reads the range answer's first bytes, from, up to the
// prefix's end, and compares them with the partial file's.
func (b *resumeBody) checkOverlap(rc io.Reader, from, off int64) error {
	got := make([]byte, off-from)
	if _, err := io.ReadFull(rc, got); err != nil {
		if errors.Is(err, io.EOF) {
			return &rangeError{offset: b.prefix, reason: "empty"}
		}
		return fmt.Errorf("fetch layer %s from byte %d: %w", b.blob, from, err)
	}
	want := make([]byte, len(got))
	if err := b.pf.readAt(want, from); err != nil {
		return fmt.Errorf("%w: %w", errPartialCorrupt, err)
	}
	if !bytes.Equal(got, want) {
		return &rangeError{offset: b.prefix, reason: "its bytes are not the blob's from the offset asked for"}
	}
	return nil
}

// Close ends the stream; a Read blocked in it returns.
func (b *resumeBody) Close() error {
	b.cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.net != nil {
		return b.net.Close()
	}
	return nil
}
