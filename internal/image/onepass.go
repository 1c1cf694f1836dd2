package image

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/vbatts/tar-split/archive/tar"
	"github.com/vbatts/tar-split/tar/asm"
	tsstorage "github.com/vbatts/tar-split/tar/storage"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	cimage "go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	graphdriver "go.podman.io/storage/drivers"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/tarlog"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// The one-pass pull (issue 26) replaces containers/image's copy.Image for
// the common case: a docker-transport image of gzip, zstd or uncompressed
// layers. copy.Image's storage destination writes every blob to a
// temporary file while it decompresses it once for its diffID, and at
// commit decompresses it again and unpacks it, one layer after the other.
// Here every missing layer is fetched, decompressed once and unpacked
// while it downloads, up to Config.MaxConcurrentDownloads layers at a
// time, each into a containers/storage staging directory
// (PrepareStagedLayer), independent of its parent; the staged layers are
// then committed in order (ApplyStagedLayer: a rename). The compressed
// digest (the manifest's) and the uncompressed digest (the config's
// diffID) are computed in the stream and checked at its end; a layer that
// fails either, or any other step, is dropped with its staging directory.
//
// Layer IDs, the image ID and the image record are those containers/image's
// storage destination writes (see chainLayerID and recordImage), so that
// images pulled either way share layers and read back alike. Whatever
// this path does not handle (schema 1 manifests, encrypted or foreign
// layers, signatures to store, compression other than gzip and zstd, a
// driver without staged layers) is pulled with copy.Image as before,
// which is logged.

// DefaultMaxConcurrentDownloads is Config.MaxConcurrentDownloads' default,
// as containerd's max_concurrent_downloads.
const DefaultMaxConcurrentDownloads = 3

// fallbackError: the image needs copy.Image; nothing was written yet.
type fallbackError struct{ reason string }

func (e *fallbackError) Error() string { return "one-pass pull not possible: " + e.reason }

func fallback(format string, args ...any) error {
	return &fallbackError{reason: fmt.Sprintf(format, args...)}
}

// onePassLayer is one layer of the image being pulled.
type onePassLayer struct {
	index  int
	blob   types.BlobInfo
	diffID digest.Digest
	id     string // the storage layer ID (chainLayerID)
	parent string // the parent's storage layer ID; "" for the base layer
	exists bool   // already in storage: nothing to fetch
	// progress is the layer's live progress (progress.go); nil: untracked.
	progress *layerTrack

	done chan struct{} // closed once out or err is set
	out  *graphdriver.DriverWithDifferOutput
	err  error
}

// chainLayerID is containers/image's storage destination's layer ID for a
// layer identified by its diffID on top of parentID ("" for none): the
// diffID's hex for a base layer, else sha256(parentID + "+" + diffID hex).
func chainLayerID(parentID string, diffID digest.Digest) string {
	if parentID == "" {
		return diffID.Encoded()
	}
	return digest.Canonical.FromString(parentID + "+" + diffID.Encoded()).Encoded()
}

// layerMediaTypeOK reports the layer media types the one-pass pull reads.
func layerMediaTypeOK(mt string) bool {
	switch mt {
	case imgspecv1.MediaTypeImageLayer, imgspecv1.MediaTypeImageLayerGzip, imgspecv1.MediaTypeImageLayerZstd,
		manifest.DockerV2Schema2LayerMediaType, manifest.DockerV2SchemaLayerMediaTypeUncompressed, "":
		return true
	}
	return false
}

// pullOnePass pulls named with the one-pass engine; a *fallbackError means
// copy.Image must do it (nothing was stored).
func (s *Store) pullOnePass(ctx context.Context, named reference.Named, sys *types.SystemContext,
	policy *signature.PolicyContext, events chan<- types.ProgressProperties, track *trackedPull) (*Image, error) {
	if drv, err := s.store.GraphDriver(); err != nil {
		return nil, err
	} else if _, ok := drv.(graphdriver.DriverWithDiffer); !ok {
		return nil, fallback("the %s driver has no staged layers", s.cfg.Driver)
	}
	srcRef, err := docker.NewReference(named)
	if err != nil {
		return nil, fmt.Errorf("reference %s: %v: %w", named, err, errdefs.ErrInvalidArgument)
	}
	rawSrc, err := srcRef.NewImageSource(ctx, sys)
	if err != nil {
		return nil, fmt.Errorf("initializing source %s: %w", named, err)
	}
	defer rawSrc.Close()

	m, err := resolveManifest(ctx, rawSrc, sys, named)
	if err != nil {
		return nil, err
	}
	unparsed, instance, topManifest, manifestBlob := m.unparsed, m.instance, m.top, m.blob
	// As copy.Image: the policy is checked before anything else of the
	// image is read.
	if allowed, err := policy.IsRunningImageAllowed(ctx, unparsed); !allowed || err != nil {
		return nil, fmt.Errorf("source image rejected: %w", err)
	}
	src, err := cimage.FromUnparsedImage(ctx, sys, unparsed)
	if err != nil {
		return nil, fmt.Errorf("initializing image from source %s: %w", named, err)
	}
	if digested, ok := named.(reference.Digested); ok {
		matches, err := manifest.MatchesDigest(manifestBlob, digested.Digest())
		if err == nil && !matches {
			matches, err = manifest.MatchesDigest(topManifest, digested.Digest())
		}
		if err != nil || !matches {
			return nil, fmt.Errorf("the digest of the image's manifest does not match the reference: %w", errdefs.ErrInvalidArgument)
		}
	}
	configInfo := src.ConfigInfo()
	configBlob, err := src.ConfigBlob(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading config %s: %w", named, err)
	}
	ociConfig, err := src.OCIConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("parsing config %s: %w", named, err)
	}
	blobs := src.LayerInfos()
	if err := checkLayerBlobs(blobs, ociConfig.RootFS.DiffIDs); err != nil {
		return nil, err
	}
	// Signatures would have to be stored as copy.Image stores them.
	if sigs, err := rawSrc.GetSignatures(ctx, instance); err != nil || len(sigs) > 0 {
		return nil, fallback("the image has signatures to store (or they could not be read: %v)", err)
	}

	layers, parent := s.onePassLayers(blobs, ociConfig.RootFS.DiffIDs)
	track.onePassLayers(layers)
	if err := s.fetchAndCommitLayers(ctx, rawSrc, layers, events); err != nil {
		return nil, err
	}

	stored, err := s.recordImage(ctx, named, src, topManifest, manifestBlob, configInfo.Digest, configBlob, parent)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", named, err)
	}
	// As istorage.ResolveReference hands the image to copy.Image's callers:
	// its digest is the platform manifest's.
	if d, ok := stored.BigDataDigests[storage.ImageDigestBigDataKey]; ok {
		stored.Digest = d
	}
	img, err := s.toImage(stored)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", named, err)
	}
	return img, nil
}

// pulledManifest is the manifest of the image a pull reads: unparsed
// is the platform's instance (instance, nil for an image without a list),
// top the manifest the reference names and blob the instance's.
type pulledManifest struct {
	unparsed  *cimage.UnparsedImage
	instance  *digest.Digest
	top, blob []byte
}

// resolveManifest reads the manifest of named at rawSrc, choosing the
// platform's image from a list; a manifest of a type the one-pass pull
// does not take falls back.
func resolveManifest(ctx context.Context, rawSrc types.ImageSource, sys *types.SystemContext, named reference.Named) (pulledManifest, error) {
	unparsed := cimage.UnparsedInstance(rawSrc, nil)
	topManifest, topType, err := unparsed.Manifest(ctx)
	if err != nil {
		return pulledManifest{}, fmt.Errorf("reading manifest %s: %w", named, err)
	}
	var instance *digest.Digest
	if manifest.MIMETypeIsMultiImage(topType) {
		list, err := manifest.ListFromBlob(topManifest, topType)
		if err != nil {
			return pulledManifest{}, fmt.Errorf("parsing manifest list %s: %w", named, err)
		}
		d, err := list.ChooseInstance(sys)
		if err != nil {
			return pulledManifest{}, fmt.Errorf("choosing an image from manifest list %s: %w", named, err)
		}
		instance = &d
		unparsed = cimage.UnparsedInstance(rawSrc, instance)
	}
	manifestBlob, manifestType, err := unparsed.Manifest(ctx)
	if err != nil {
		return pulledManifest{}, fmt.Errorf("reading manifest %s: %w", named, err)
	}
	switch manifest.NormalizedMIMEType(manifestType) {
	case manifest.DockerV2Schema2MediaType, imgspecv1.MediaTypeImageManifest:
	default:
		return pulledManifest{}, fallback("manifest type %s", manifestType)
	}
	return pulledManifest{unparsed: unparsed, instance: instance, top: topManifest, blob: manifestBlob}, nil
}

// checkLayerBlobs checks an image's layers before any is read: their
// number, and that each is a plain layer (else the pull falls back) with
// a valid digest and diffID.
func checkLayerBlobs(blobs []types.BlobInfo, diffIDs []digest.Digest) error {
	if len(blobs) > maxImageLayers {
		return errTooManyLayers
	}
	if len(diffIDs) != len(blobs) {
		return fallback("%d layers but %d diffIDs in the config", len(blobs), len(diffIDs))
	}
	for i, b := range blobs {
		switch {
		case len(b.URLs) > 0:
			return fallback("foreign layer %s", b.Digest)
		case b.CryptoOperation != types.PreserveOriginalCrypto || strings.HasSuffix(b.MediaType, "+encrypted"):
			return fallback("encrypted layer %s", b.Digest)
		case !layerMediaTypeOK(b.MediaType):
			return fallback("layer media type %s", b.MediaType)
		}
		if err := b.Digest.Validate(); err != nil {
			return fmt.Errorf("layer %d digest %q: %v: %w", i, b.Digest, err, errdefs.ErrInvalidArgument)
		}
		if err := diffIDs[i].Validate(); err != nil {
			return fmt.Errorf("layer %d diffID %q: %v: %w", i, diffIDs[i], err, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// onePassLayers are the layers of blobs, chained by their IDs, each known
// to exist already or not; top is the last one's ID.
func (s *Store) onePassLayers(blobs []types.BlobInfo, diffIDs []digest.Digest) (layers []*onePassLayer, top string) {
	layers = make([]*onePassLayer, len(blobs))
	parent := ""
	for i, b := range blobs {
		l := &onePassLayer{index: i, blob: b, diffID: diffIDs[i], parent: parent, done: make(chan struct{})}
		l.id = chainLayerID(parent, l.diffID)
		if _, err := s.store.Layer(l.id); err == nil {
			l.exists = true
			close(l.done)
		}
		layers[i] = l
		parent = l.id
	}
	return layers, parent
}

// fetchAndCommitLayers stages every layer not in storage, at most
// MaxConcurrentDownloads at a time and in the image's order, and commits
// them in order as they become ready. On failure, every staged layer not
// yet committed is dropped; committed ones are left for the orphan-layer
// collection (as copy.Image leaves them). Every staging directory is
// removed at the end.
func (s *Store) fetchAndCommitLayers(ctx context.Context, src types.ImageSource, layers []*onePassLayer,
	events chan<- types.ProgressProperties) (retErr error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := s.cfg.MaxConcurrentDownloads
	if limit <= 0 {
		limit = DefaultMaxConcurrentDownloads
	}
	sem := make(chan struct{}, limit)
	var workers sync.WaitGroup
	scheduled := make(chan struct{})
	go func() {
		defer close(scheduled)
		for _, l := range layers {
			if l.exists {
				events <- types.ProgressProperties{Event: types.ProgressEventSkipped, Artifact: l.blob}
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				l.err = context.Cause(ctx)
				close(l.done)
				continue
			}
			workers.Add(1)
			go func() {
				defer workers.Done()
				defer func() { <-sem }()
				l.out, l.err = s.stageLayer(ctx, src, l, events)
				l.progress.staged(l.err)
				if l.err != nil {
					cancel(l.err)
				}
				close(l.done)
			}()
		}
	}()
	defer func() {
		if retErr != nil {
			cancel(retErr)
		}
		<-scheduled
		workers.Wait()
		for _, l := range layers {
			if l.out != nil {
				if err := s.store.CleanupStagedLayer(l.out); err != nil {
					log.G(ctx).Warn("remove staged layer", "layer", l.blob.Digest, "dir", l.out.Target, "err", err)
				}
				l.out = nil
			}
		}
	}()

	for _, l := range layers {
		if l.exists {
			continue
		}
		select {
		case <-l.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if l.err != nil {
			return l.err
		}
		start := time.Now()
		l.progress.committing()
		if err := s.commitStagedLayer(l); err != nil {
			return fmt.Errorf("commit layer %s: %w", l.blob.Digest, err)
		}
		l.progress.done()
		// containers/storage has written the tar-split out and closed it.
		l.out.TarSplit = nil
		s.metrics.observePhase("layer", "commit", time.Since(start))
	}
	return nil
}

// commitStagedLayer makes l's staged directory the layer l.id, unless a
// concurrent pull committed that layer meanwhile (then the staged copy is
// dropped). stagedCommit serializes the check with the commit: containers/
// storage's ApplyStagedLayer onto an existing ID would replace its
// directory.
func (s *Store) commitStagedLayer(l *onePassLayer) error {
	s.stagedCommit.Lock()
	defer s.stagedCommit.Unlock()
	if _, err := s.store.Layer(l.id); err == nil {
		return nil // the deferred cleanup drops l.out
	}
	_, err := s.store.ApplyStagedLayer(storage.ApplyStagedLayerOptions{
		ID:          l.id,
		ParentLayer: l.parent,
		DiffOutput:  l.out,
		DiffOptions: &graphdriver.ApplyDiffWithDifferOpts{},
	})
	// Committed or not, the deferred cleanup removes what is left of the
	// staging directory (its lock file), as containers/image does.
	return err
}

// stageLayer fetches l's blob and unpacks it into a new staging
// directory, verifying both digests; a transient failure is retried and
// resumed (resume.go).
func (s *Store) stageLayer(ctx context.Context, src types.ImageSource, l *onePassLayer,
	events chan<- types.ProgressProperties) (out *graphdriver.DriverWithDifferOutput, err error) {
	l.progress.begin()
	events <- types.ProgressProperties{Event: types.ProgressEventNewArtifact, Artifact: l.blob}
	var d *streamDiffer // the last attempt's
	defer func() {
		// Done even on failure, which may yet fall back to copy.Image:
		// the stall watchdog counts the blobs in flight.
		var read, reported int64
		if d != nil {
			read, reported = d.read, d.reported
		}
		events <- types.ProgressProperties{Event: types.ProgressEventDone, Artifact: l.blob,
			Offset: uint64(read), OffsetUpdate: uint64(read - reported)}
		if err != nil && ctx.Err() != nil {
			// Cancelled: by the caller, the watchdog or another layer's
			// failure, which is the error to report.
			out, err = nil, context.Cause(ctx)
		}
	}()
	return s.stageWithRetries(ctx, src, l, func() *streamDiffer {
		d = &streamDiffer{ctx: ctx, layer: l, events: events, gunzip: s.gunzip}
		return d
	})
}

// stageAttempt unpacks the blob stream body into a new staging directory
// through d, verifying both digests.
func (s *Store) stageAttempt(ctx context.Context, l *onePassLayer, d *streamDiffer, body io.ReadCloser) (*graphdriver.DriverWithDifferOutput, error) {
	start := time.Now()
	d.body = body
	defer d.closeBody()
	out, err := s.store.PrepareStagedLayer(nil, d)
	if err != nil {
		if out != nil && out.Target != "" {
			_ = s.store.CleanupStagedLayer(out)
		}
		return nil, fmt.Errorf("layer %s: %w", l.blob.Digest, err)
	}
	s.metrics.observePhase("layer", "stage", time.Since(start))
	log.G(ctx).Debug("staged layer", "digest", l.blob.Digest, "bytes", d.read, "unpacked", out.Size,
		"duration", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// LayerDigestError is a layer whose content does not match the digest the
// manifest or the config gives it: the registry or the image is corrupt.
type LayerDigestError struct {
	Layer    digest.Digest // the manifest's blob digest
	What     string        // "compressed digest", "size", "diffID"
	Expected string
	Got      string
}

func (e *LayerDigestError) Error() string {
	return fmt.Sprintf("layer %s: %s mismatch: expected %s, got %s", e.Layer, e.What, e.Expected, e.Got)
}

// Unwrap classifies the error: a corrupt image or registry.
func (e *LayerDigestError) Unwrap() error { return errdefs.ErrInvalidArgument }

// streamDiffer is the containers/storage Differ of one layer: it unpacks
// the blob stream into the staging directory it is given.
type streamDiffer struct {
	ctx       context.Context
	body      io.ReadCloser
	closeOnce sync.Once
	layer     *onePassLayer
	events    chan<- types.ProgressProperties

	// gunzip decompresses gzip layers.
	gunzip gunzipper

	read, reported int64 // compressed bytes read and reported
	lastReport     time.Time
}

func (d *streamDiffer) Read(p []byte) (int, error) {
	n, err := d.body.Read(p)
	d.read += int64(n)
	d.layer.progress.fetchedTo(n, d.read)
	if now := time.Now(); n > 0 && now.Sub(d.lastReport) >= progressInterval {
		d.events <- types.ProgressProperties{Event: types.ProgressEventRead, Artifact: d.layer.blob,
			Offset: uint64(d.read), OffsetUpdate: uint64(d.read - d.reported)}
		d.reported, d.lastReport = d.read, now
	}
	return n, err
}

// Close implements graphdriver.Differ: it closes the blob's stream.
func (d *streamDiffer) Close() error {
	d.closeBody()
	return nil
}

// closeBody closes the blob's stream, once: a Read blocked on it returns.
func (d *streamDiffer) closeBody() {
	d.closeOnce.Do(func() { _ = d.body.Close() })
}

// stoppableReader is a decompressor read by one goroutine and closed by
// another: Close waits for a Read in flight to return (decompressors'
// Close is not safe beside a Read), and Reads after it fail.
type stoppableReader struct {
	mu     sync.Mutex
	r      io.ReadCloser
	closed bool
}

var errLayerStreamClosed = errors.New("layer stream closed")

func (s *stoppableReader) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errLayerStreamClosed
	}
	return s.r.Read(p)
}

func (s *stoppableReader) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.r.Close()
}

// Magic numbers of the compressions the one-pass pull reads.
var (
	gzipMagic  = []byte{0x1f, 0x8b, 0x08}
	zstdMagic  = []byte{0x28, 0xb5, 0x2f, 0xfd}
	bzip2Magic = []byte{0x42, 0x5a, 0x68}
	xzMagic    = []byte{0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00}
)

// ApplyDiff implements graphdriver.Differ.
func (d *streamDiffer) ApplyDiff(dest string, options *archive.TarOptions, differOpts *graphdriver.DifferOptions) (graphdriver.DriverWithDifferOutput, error) {
	var out graphdriver.DriverWithDifferOutput
	if differOpts != nil && differOpts.Format != graphdriver.DifferOutputFormatDir {
		return out, fallback("the storage driver wants a flat (composefs) layout")
	}
	l := d.layer
	compressed := l.blob.Digest.Algorithm()
	if !compressed.Available() {
		return out, fallback("digest algorithm %s", compressed)
	}
	compressedDigester := compressed.Digester()
	br := bufio.NewReaderSize(io.TeeReader(d, compressedDigester.Hash()), 128<<10)
	dec, err := d.decompressor(br)
	if err != nil {
		return out, err
	}
	// tar-split reads the stream on a goroutine of its own, which may still
	// be in a Read when the unpacking fails: the blob is closed first, so
	// that Read returns, and the decompressor only after it did.
	uncompressed := &stoppableReader{r: dec}
	defer func() {
		d.closeBody()
		_ = uncompressed.Close()
	}()

	diffIDAlgo := l.diffID.Algorithm()
	if !diffIDAlgo.Available() {
		return out, fallback("diffID algorithm %s", diffIDAlgo)
	}
	diffIDDigester := diffIDAlgo.Digester()
	ids, err := newIDLogger()
	if err != nil {
		return out, err
	}
	defer ids.close()
	var size countWriter
	tee := io.TeeReader(uncompressed, io.MultiWriter(diffIDDigester.Hash(), &size, ids.logger, l.progress))
	// The tar-split (the tar headers containers/storage keeps to rebuild
	// the layer's tar, about 1 KiB a file) goes to an unlinked file beside
	// the staged directory, not to memory: a layer of millions of files
	// costs podbayd no more than a layer of ten. The output owns the file
	// once the layer is staged; containers/storage closes it at commit or
	// clean-up.
	tarSplitFile, err := openUnlinkedFile(filepath.Dir(dest))
	if err != nil {
		return out, fmt.Errorf("tar-split file: %w", err)
	}
	defer func() {
		if out.TarSplit == nil {
			_ = tarSplitFile.Close()
		}
	}()
	tarSplit := bufio.NewWriterSize(tarSplitFile, 64<<10)
	packer := &rootWatchPacker{Packer: tsstorage.NewJSONPacker(tarSplit)}
	payload, packed, err := asm.NewInputTarStreamWithDone(tee, packer, tsstorage.NewDiscardFilePutter())
	if err != nil {
		return out, err
	}
	// tar-split feeds payload from a goroutine of its own: end it however
	// the unpacking ends.
	defer payload.Close()
	unpackErr := unpackConfined(payload, dest, options)
	if unpackErr == nil {
		// What follows the tar's end (a record's padding, part of the
		// diffID) goes through tar-split too, which has packed every
		// entry once it reports done; then the compressed stream's end.
		if _, err := io.Copy(io.Discard, payload); err != nil {
			unpackErr = &streamError{err: err}
		} else if err := <-packed; err != nil {
			unpackErr = &streamError{err: fmt.Errorf("tar-split: %w", err)}
		} else if _, err := io.Copy(io.Discard, br); err != nil {
			unpackErr = &streamError{err: err}
		}
	}
	if unpackErr != nil {
		if d.ctx.Err() != nil {
			return out, context.Cause(d.ctx)
		}
		return out, unpackErr
	}
	ids.close()
	if err := tarSplit.Flush(); err != nil {
		return out, fmt.Errorf("tar-split file: %w", err)
	}

	if err := d.verify(compressedDigester.Digest(), diffIDDigester.Digest()); err != nil {
		return out, err
	}

	// Assigned to out, which the deferred close of the tar-split file
	// reads.
	out, err = d.stagedOutput(dest, size.n, ids, packer.root, tarSplitFile)
	return out, err
}

// stagedOutput is the differ's output for the layer staged at dest, of
// size bytes uncompressed, whose tar set the root's mode where
// rootInTar; it owns tarSplit, unless it is an error.
func (d *streamDiffer) stagedOutput(dest string, size int64, ids *idLogger, rootInTar bool, tarSplit *os.File) (graphdriver.DriverWithDifferOutput, error) {
	l := d.layer
	var out graphdriver.DriverWithDifferOutput
	out.Size = size
	out.UncompressedDigest = l.diffID
	out.CompressedDigest = l.blob.Digest
	out.UIDs = sortedIDs(ids.uids)
	out.GIDs = sortedIDs(ids.gids)
	if rootInTar {
		// The tar set the layer root's mode, as an unpacking into the
		// layer's own directory would have; without this the driver gives
		// the staged root its parent's mode.
		st, err := os.Lstat(dest)
		if err != nil {
			return graphdriver.DriverWithDifferOutput{}, err
		}
		mode := st.Mode()
		out.RootDirMode = &mode
	}
	out.TarSplit = tarSplit
	return out, nil
}

// decompressor is the decompressing reader of the layer blob br reads,
// chosen by its magic number; an uncompressed layer is read as it is.
func (d *streamDiffer) decompressor(br *bufio.Reader) (io.ReadCloser, error) {
	magic, err := br.Peek(len(xzMagic))
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, &streamError{err: err}
	}
	var dec io.ReadCloser
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		if dec, err = d.gunzip.open(d.ctx, br); err != nil {
			return nil, &streamError{err: fmt.Errorf("gzip: %w", err)}
		}
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(1<<30))
		if err != nil {
			return nil, &streamError{err: fmt.Errorf("zstd: %w", err)}
		}
		dec = zr.IOReadCloser()
	case bytes.HasPrefix(magic, bzip2Magic), bytes.HasPrefix(magic, xzMagic):
		return nil, fallback("layer %s is bzip2 or xz compressed", d.layer.blob.Digest)
	default:
		dec = io.NopCloser(br)
	}
	return dec, nil
}

// idLogger records the user and group IDs of a layer's files (whiteouts
// left out) from its tar stream.
type idLogger struct {
	logger     io.WriteCloser
	uids, gids map[uint32]struct{}
	closed     bool
}

func newIDLogger() (*idLogger, error) {
	l := &idLogger{uids: map[uint32]struct{}{}, gids: map[uint32]struct{}{}}
	var err error
	l.logger, err = tarlog.NewLogger(func(h *tar.Header) {
		if !strings.HasPrefix(path.Base(h.Name), archive.WhiteoutPrefix) {
			l.uids[uint32(h.Uid)] = struct{}{}
			l.gids[uint32(h.Gid)] = struct{}{}
		}
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// close ends the logging, once: the IDs are complete after it.
func (l *idLogger) close() {
	if !l.closed {
		l.closed = true
		_ = l.logger.Close()
	}
}

// verify checks the layer read against its descriptor: the compressed
// digest, the size and the diffID the image config names.
func (d *streamDiffer) verify(compressed, diffID digest.Digest) error {
	l := d.layer
	if got := compressed; got != l.blob.Digest {
		return &LayerDigestError{Layer: l.blob.Digest, What: "compressed digest", Expected: l.blob.Digest.String(), Got: got.String()}
	}
	if l.blob.Size >= 0 && d.read != l.blob.Size {
		return &LayerDigestError{Layer: l.blob.Digest, What: "size", Expected: fmt.Sprint(l.blob.Size), Got: fmt.Sprint(d.read)}
	}
	if got := diffID; got != l.diffID {
		return &LayerDigestError{Layer: l.blob.Digest, What: "diffID (the config's uncompressed digest)", Expected: l.diffID.String(), Got: got.String()}
	}
	return nil
}

// openUnlinkedFile opens a read-write file in dir that has no name: it is
// gone when closed, whatever becomes of the process.
func openUnlinkedFile(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, unix.O_TMPFILE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return f, nil
	}
	// A file system without O_TMPFILE: a named file, removed at once.
	f, err = os.CreateTemp(dir, ".tar-split-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func sortedIDs(m map[uint32]struct{}) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// rootWatchPacker notes whether the tar has an entry for its root
// directory.
type rootWatchPacker struct {
	tsstorage.Packer
	root bool
}

func (p *rootWatchPacker) AddEntry(e tsstorage.Entry) (int, error) {
	if e.Type == tsstorage.FileType && path.Clean("/"+e.GetName()) == "/" {
		p.root = true
	}
	return p.Packer.AddEntry(e)
}

// recordImage writes the image record as containers/image's storage
// destination does: ID the config digest's hex, the config under its
// digest, the manifest under "manifest-<digest>" and "manifest" (and the
// list it was chosen from under its own digest), the creation date from
// the config, the empty signature metadata, and named as a name.
func (s *Store) recordImage(ctx context.Context, named reference.Named, src types.Image, topManifest, manifestBlob []byte,
	configDigest digest.Digest, configBlob []byte, topLayer string) (*storage.Image, error) {
	m, err := manifest.FromBlob(manifestBlob, manifest.GuessMIMEType(manifestBlob))
	if err != nil {
		return nil, fmt.Errorf("parsing manifest: %w", err)
	}
	id, err := m.ImageID(nil)
	if err != nil {
		return nil, err
	}
	manifestDigest, err := manifest.Digest(manifestBlob)
	if err != nil {
		return nil, err
	}
	opts := &storage.ImageOptions{}
	if inspect, err := src.Inspect(ctx); err == nil && inspect.Created != nil {
		opts.CreationDate = *inspect.Created
	}
	opts.BigData = append(opts.BigData, storage.ImageBigDataOption{
		Key: configDigest.String(), Data: configBlob, Digest: digest.Canonical.FromBytes(configBlob),
	})
	if !bytes.Equal(topManifest, manifestBlob) {
		topDigest, err := manifest.Digest(topManifest)
		if err != nil {
			return nil, err
		}
		opts.BigData = append(opts.BigData, storage.ImageBigDataOption{
			Key: storage.ImageDigestManifestBigDataNamePrefix + "-" + topDigest.String(), Data: topManifest, Digest: topDigest,
		})
	}
	opts.BigData = append(opts.BigData,
		storage.ImageBigDataOption{
			Key: storage.ImageDigestManifestBigDataNamePrefix + "-" + manifestDigest.String(), Data: manifestBlob, Digest: manifestDigest,
		},
		storage.ImageBigDataOption{Key: storage.ImageDigestBigDataKey, Data: manifestBlob, Digest: manifestDigest})
	// containers/image's storageImageMetadata with no signatures.
	metadata, err := json.Marshal(struct {
		SignatureSizes  []int                   `json:"signature-sizes,omitempty"`
		SignaturesSizes map[digest.Digest][]int `json:"signatures-sizes,omitempty"`
	}{})
	if err != nil {
		return nil, err
	}
	opts.Metadata = string(metadata)

	created := true
	img, err := s.store.CreateImage(id, nil, topLayer, "", opts)
	if err != nil {
		if !errors.Is(err, storage.ErrDuplicateID) {
			return nil, fmt.Errorf("creating image %q: %w", id, err)
		}
		created = false
		if img, err = s.store.Image(id); err != nil {
			return nil, fmt.Errorf("reading image %q: %w", id, err)
		}
		if img.TopLayer != topLayer {
			return nil, fmt.Errorf("image with ID %q already exists, but uses a different top layer: %w", id, storage.ErrDuplicateID)
		}
		for _, data := range opts.BigData {
			if err := s.store.SetImageBigData(img.ID, data.Key, data.Data, manifest.Digest); err != nil {
				return nil, fmt.Errorf("saving big data %q for image %q: %w", data.Key, img.ID, err)
			}
		}
		if err := s.store.SetMetadata(img.ID, opts.Metadata); err != nil {
			return nil, fmt.Errorf("saving metadata for image %q: %w", img.ID, err)
		}
	}
	if err := s.store.AddNames(img.ID, []string{named.String()}); err != nil {
		if created {
			if _, derr := s.store.DeleteImage(img.ID, true); derr != nil {
				log.G(ctx).Warn("delete incomplete image", "id", img.ID, "err", derr)
			}
		}
		return nil, fmt.Errorf("adding names %v to image %q: %w", named, img.ID, err)
	}
	return s.store.Image(img.ID)
}
