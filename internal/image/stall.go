package image

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/errdefs"
)

// DefaultPullProgressTimeout is Config.PullProgressTimeout's default, as
// containerd's image_pull_progress_timeout.
const DefaultPullProgressTimeout = 5 * time.Minute

// ProgressTimeoutError is a pull cancelled because the registry sent
// nothing for Config.PullProgressTimeout. It is classified as
// errdefs.ErrUnavailable, as any other registry that cannot serve now
// (containers/image's own network timeouts are too): a retry may succeed.
type ProgressTimeoutError struct {
	Ref     string
	Timeout time.Duration
}

func (e *ProgressTimeoutError) Error() string {
	return fmt.Sprintf("pull %s: no data from the registry for %s (image pull_progress_timeout); pull cancelled",
		e.Ref, e.Timeout)
}

// Unwrap classifies the error.
func (e *ProgressTimeoutError) Unwrap() error { return errdefs.ErrUnavailable }

// stallWatchdog cancels a pull when no data arrived for its timeout while
// the pull was waiting for the registry: from the start (manifests, the
// first blob's GET) and while a blob download is under way. It pauses once
// every blob begun so far is complete, so that committing a large layer to
// storage, which reads nothing from the network, does not count as a
// stall; the next blob download re-arms it.
//
// containers/image reports a blob's progress at most every
// progressInterval, so the timeout is meant to be many times that.
type stallWatchdog struct {
	timeout time.Duration
	timer   *time.Timer

	mu       sync.Mutex
	inFlight int // guarded by mu; blobs begun and not done
}

// newStallWatchdog arms a watchdog that calls stalled after timeout
// without progress.
func newStallWatchdog(timeout time.Duration, stalled func()) *stallWatchdog {
	return &stallWatchdog{timeout: timeout, timer: time.AfterFunc(timeout, stalled)}
}

// observe accounts for one progress event: any event is progress.
func (w *stallWatchdog) observe(ev types.ProgressEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev {
	case types.ProgressEventNewArtifact:
		w.inFlight++
	case types.ProgressEventDone:
		w.inFlight = max(w.inFlight-1, 0)
	}
	if w.inFlight == 0 && ev == types.ProgressEventDone {
		w.timer.Stop()
		return
	}
	w.timer.Reset(w.timeout)
}

// withStallWatchdog returns a context that is cancelled with a
// *ProgressTimeoutError cause when the watchdog fires, and the watchdog.
func withStallWatchdog(ctx context.Context, ref string, timeout time.Duration) (context.Context, *stallWatchdog, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := newStallWatchdog(timeout, func() { cancel(&ProgressTimeoutError{Ref: ref, Timeout: timeout}) })
	return ctx, w, func() {
		w.timer.Stop()
		cancel(nil)
	}
}
