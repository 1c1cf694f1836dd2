package image

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/signature"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// progressInterval is how often containers/image reports a blob's progress.
const progressInterval = time.Second

// pullCall is one pull shared by every caller asking for the same
// reference with the same credentials.
type pullCall struct {
	done   chan struct{}
	img    *Image // set before done is closed
	err    error  // set before done is closed
	cancel context.CancelFunc

	waiters int // guarded by Store.mu
}

// Pull pulls ref into storage and returns the image. "busybox" is
// docker.io/library/busybox:latest (or, with a registries.conf short-name
// mode, the first of its candidates that pulls); a multi-arch image yields
// the current platform's image.
//
// Concurrent pulls of one reference with the same credentials share one
// download. A caller that gives up (its ctx ends) stops waiting; the shared
// pull is cancelled only when every caller has given up.
//
// Errors: a malformed reference is ErrInvalidArgument; an unknown
// repository or manifest ErrNotFound; an unreachable or failing registry
// ErrUnavailable; refused credentials ErrUnauthorized. A failed or
// cancelled pull leaves no image, layer or download behind.
func (s *Store) Pull(ctx context.Context, ref string, auth *Auth) (*Image, error) {
	return s.PullForNamespace(ctx, ref, auth, "")
}

// PullForNamespace is Pull for a pod of namespace ("" for none): with a
// policy directory (Config.PolicyDir), the image must satisfy
// <dir>/<namespace>.json when that file exists. An image the policy
// refuses is ErrPermissionDenied naming the policy file, and nothing of
// it is stored.
func (s *Store) PullForNamespace(ctx context.Context, ref string, auth *Auth, namespace string) (*Image, error) {
	candidates, err := s.pullCandidates(ref)
	if err != nil {
		return nil, err
	}
	policyFile, err := s.policy.fileFor(namespace)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = c.String()
	}
	// Callers under different policies do not share a pull.
	key := strings.Join(names, ",") + "\x00" + auth.key() + "\x00" + policyFile

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("pull %s: image store closed: %w", ref, errdefs.ErrUnavailable)
	}
	call, ok := s.pulls[key]
	if !ok {
		// The shared pull keeps the first caller's log fields but not its
		// cancellation.
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		call = &pullCall{done: make(chan struct{}), cancel: cancel}
		s.pulls[key] = call
		s.memRelease.hold()
		s.pullsDone.Add(1)
		go func() {
			defer s.pullsDone.Done()
			img, err := s.pull(pctx, ref, candidates, auth, policyFile)
			cancel()
			s.mu.Lock()
			if s.pulls[key] == call {
				delete(s.pulls, key)
			}
			if len(s.pulls) == 0 && !s.closed {
				s.memRelease.idle()
			}
			call.img, call.err = img, err
			s.mu.Unlock()
			close(call.done)
		}()
	} else {
		log.G(ctx).Debug("joining pull in progress", "ref", ref)
	}
	call.waiters++
	s.mu.Unlock()

	select {
	case <-call.done:
		if call.err != nil {
			return nil, call.err
		}
		return call.img.clone(), nil
	case <-ctx.Done():
		s.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			call.cancel()
			// A new caller must start afresh, not join a cancelled pull.
			if s.pulls[key] == call {
				delete(s.pulls, key)
			}
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("pull %s: %w", ref, ctx.Err())
	}
}

// pull tries each candidate in turn.
func (s *Store) pull(ctx context.Context, ref string, candidates []reference.Named, auth *Auth, policyFile string) (img *Image, retErr error) {
	start := time.Now()
	track := s.progress.begin(ctx, ref)
	s.layerWriters.RLock()
	defer func() {
		track.finish(retErr)
		s.layerWriters.RUnlock()
		if retErr != nil {
			// A layer committed before the failure is not referenced by
			// any image.
			s.gcPending.Store(true)
		}
		s.collectOrphanLayers(ctx)
		s.partials.collect(ctx, time.Now())
	}()

	sys, err := s.systemContext(auth)
	if err != nil {
		return nil, err
	}
	// Pick up registries.conf edits (a new mirror, an insecure registry)
	// without a restart; parsing it is cheap next to a pull.
	sysregistriesv2.InvalidateCache()
	policy, err := s.policy.context(ctx, policyFile)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	defer func() { _ = policy.Destroy() }()

	var errs []error
	for _, named := range candidates {
		track.tryCandidate(named.String())
		progress := &pullProgress{ref: named.String(), metrics: s.metrics, track: track}
		progress.times.start = start
		img, err := s.copyFromRegistry(ctx, named, sys, policy, progress)
		if err == nil {
			progress.times.end = time.Now()
			s.metrics.observePull(progress.times)
			s.metrics.observe(time.Since(start), nil)
			t := progress.times
			phases := []any{"resolve", t.copyStart.Sub(t.start).Round(time.Millisecond)}
			if !t.firstBlob.IsZero() {
				phases = append(phases, "manifest", t.firstBlob.Sub(t.copyStart).Round(time.Millisecond),
					"layers", t.lastBlob.Sub(t.firstBlob).Round(time.Millisecond),
					"commit", t.copyEnd.Sub(t.lastBlob).Round(time.Millisecond))
			}
			log.G(ctx).Info("pulled image", append([]any{"ref", named.String(), "id", img.ID, "size", img.Size,
				"downloaded", progress.bytes, "blobs", progress.blobs, "reused", progress.skipped, "copy", progress.copyImage,
				"duration", time.Since(start).Round(time.Millisecond)}, phases...)...)
			return img, nil
		}
		log.G(ctx).Debug("pull candidate failed", "ref", named.String(), "err", err)
		var refused signature.PolicyRequirementError
		if errors.As(err, &refused) {
			// The policy's answer holds for every candidate.
			err = fmt.Errorf("pull %s: refused by signature policy %s: %w: %w", named, policyFile, err, errdefs.ErrPermissionDenied)
			s.metrics.observe(time.Since(start), err)
			return nil, err
		}
		errs = append(errs, classifyPullError(named.String(), err))
		if ctx.Err() != nil {
			break
		}
	}
	err = pickPullError(errs)
	s.metrics.observe(time.Since(start), err)
	return nil, err
}

// pickPullError returns the error that says most: with several short-name
// candidates, "unauthorized" or "unreachable" at one registry says more
// than "not found" at another. The others are kept in the message only, so
// that the class is the chosen one's.
func pickPullError(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	primary := 0
	for i, err := range errs {
		if !errdefs.IsNotFound(err) {
			primary = i
			break
		}
	}
	var others []string
	for i, err := range errs {
		if i != primary {
			others = append(others, err.Error())
		}
	}
	return fmt.Errorf("%w (other candidates: %s)", errs[primary], strings.Join(others, "; "))
}

// copyFromRegistry copies named from its registry (or a mirror) into
// storage under that name.
func (s *Store) copyFromRegistry(ctx context.Context, named reference.Named, sys *types.SystemContext,
	policy *signature.PolicyContext, progress *pullProgress) (*Image, error) {
	src, err := docker.NewReference(named)
	if err != nil {
		return nil, fmt.Errorf("reference %s: %v: %w", named, err, errdefs.ErrInvalidArgument)
	}
	dest, err := istorage.Transport.NewStoreReference(s.store, named, "")
	if err != nil {
		return nil, fmt.Errorf("storage reference %s: %w", named, err)
	}
	// A registry that stops sending cancels the pull; the caller's context
	// alone would wait for as long as the kubelet does.
	ctx, watchdog, stopWatchdog := withStallWatchdog(ctx, named.String(), s.cfg.PullProgressTimeout)
	defer stopWatchdog()
	progress.watchdog = watchdog
	// An image deeper than the storage driver can mount is stopped once
	// its blobs pass the bound, before it costs more.
	ctx, tooDeep := context.WithCancelCause(ctx)
	defer tooDeep(nil)
	progress.tooDeep = func() { tooDeep(errTooManyLayers) }
	var resolved types.ImageReference
	events := make(chan types.ProgressProperties)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		progress.consume(ctx, events)
	}()
	progress.times.copyStart = time.Now()
	var img *Image
	var fb *fallbackError
	if !s.copyPull {
		img, err = s.pullOnePass(ctx, named, sys, policy, events, progress.track)
		if errors.As(err, &fb) {
			log.G(ctx).Info("pulling with containers/image's copy", "ref", named.String(), "reason", fb.reason)
			img, err = nil, nil
		}
	}
	if img == nil && err == nil {
		progress.copyImage = true
		copyEvents, stopCopyEvents := progress.track.copyEvents(events)
		_, err = copy.Image(ctx, policy, dest, src, &copy.Options{
			SourceCtx:               sys,
			DestinationCtx:          sys,
			ProgressInterval:        progressInterval,
			Progress:                copyEvents,
			ReportResolvedReference: &resolved,
		})
		stopCopyEvents()
	}
	progress.times.copyEnd = time.Now()
	close(events)
	<-drained
	if err != nil {
		var stall *ProgressTimeoutError
		if errors.As(context.Cause(ctx), &stall) {
			return nil, stall
		}
		if errors.Is(context.Cause(ctx), errTooManyLayers) {
			return nil, errTooManyLayers
		}
		return nil, err
	}
	if img != nil {
		return img, nil
	}
	if resolved == nil {
		return nil, fmt.Errorf("pull %s: storage reported no image", named)
	}
	_, stored, err := istorage.ResolveReference(resolved)
	if err != nil {
		return nil, fmt.Errorf("pull %s: find stored image: %w", named, err)
	}
	img, err = s.toImage(stored)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", named, err)
	}
	return img, nil
}

// maxImageLayers is the most layers an image may have: containers/storage's
// overlay driver refuses to mount more (its maxDepth), and creating each
// costs more than the one before (its lower file lists all below it), so
// that an image of thousands of empty layers kept a pull busy for minutes
// and could never run.
const maxImageLayers = 500

// errTooManyLayers: the image has more than maxImageLayers layers.
var errTooManyLayers = fmt.Errorf("the image has more than %d layers, more than the storage driver can mount: %w", maxImageLayers, errdefs.ErrInvalidArgument)

// pullProgress logs a pull's blobs at debug level and counts its bytes.
type pullProgress struct {
	ref      string
	metrics  *pullMetrics
	track    *trackedPull   // the pull's live progress (progress.go)
	watchdog *stallWatchdog // nil: none
	// tooDeep, when set, is called once the pull has started more blobs
	// than an image of maxImageLayers layers and its config have.
	tooDeep func()
	started int    // blobs started or reused; written only by consume
	bytes   uint64 // written only by consume, read after it returned
	blobs   int    // downloaded
	skipped int    // already present
	// copyImage: containers/image's copy.Image pulled the image (not the
	// one-pass engine).
	copyImage bool
	// times: consume sets the blob moments (the channel is unbuffered,
	// so an event is received as it is sent).
	times pullTimes
}

func (p *pullProgress) consume(ctx context.Context, events <-chan types.ProgressProperties) {
	logger := log.G(ctx)
	for ev := range events {
		if p.watchdog != nil {
			p.watchdog.observe(ev.Event)
		}
		p.blobMoment(ev.Event, time.Now())
		if ev.Event == types.ProgressEventNewArtifact || ev.Event == types.ProgressEventSkipped {
			if p.started++; p.started == maxImageLayers+2 && p.tooDeep != nil {
				p.tooDeep()
			}
		}
		switch ev.Event {
		case types.ProgressEventNewArtifact:
			logger.Debug("pulling blob", "ref", p.ref, "digest", ev.Artifact.Digest, "size", ev.Artifact.Size)
		case types.ProgressEventRead:
			p.add(ev.OffsetUpdate)
			logger.Debug("pull progress", "ref", p.ref, "digest", ev.Artifact.Digest,
				"bytes", ev.Offset, "size", ev.Artifact.Size)
		case types.ProgressEventDone:
			p.add(ev.OffsetUpdate)
			p.blobs++
			logger.Debug("pulled blob", "ref", p.ref, "digest", ev.Artifact.Digest, "bytes", ev.Offset)
		case types.ProgressEventSkipped:
			p.skipped++
			logger.Debug("blob already present", "ref", p.ref, "digest", ev.Artifact.Digest)
		}
	}
}

// blobMoment notes when the first blob began and the last one ended.
func (p *pullProgress) blobMoment(ev types.ProgressEvent, now time.Time) {
	switch ev {
	case types.ProgressEventNewArtifact, types.ProgressEventSkipped:
		if p.times.firstBlob.IsZero() {
			p.times.firstBlob = now
		}
	}
	switch ev {
	case types.ProgressEventDone, types.ProgressEventSkipped:
		p.times.lastBlob = now
	}
}

func (p *pullProgress) add(n uint64) {
	p.bytes += n
	p.metrics.addBytes(n)
}

// clone returns a deep copy, so that callers sharing a pull do not share
// slices and maps.
func (img *Image) clone() *Image {
	out := *img
	out.RepoTags = append([]string(nil), img.RepoTags...)
	out.RepoDigests = append([]string(nil), img.RepoDigests...)
	if img.UID != nil {
		uid := *img.UID
		out.UID = &uid
	}
	out.Config = cloneConfig(img.Config)
	if img.Annotations != nil {
		out.Annotations = make(map[string]string, len(img.Annotations))
		for k, v := range img.Annotations {
			out.Annotations[k] = v
		}
	}
	return &out
}
