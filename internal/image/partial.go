package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	digest "github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/log"
)

// Resumable pulls (issue 33). Every layer's compressed bytes are written,
// as the unpack reads them, to a partial file under the graph root
// (PartialDir: <algo>-<hex>), with a checkpoint beside it (<algo>-<hex>.json:
// an offset and the SHA-256 of the file's bytes up to it) written only once
// those bytes are fdatasync'ed: every checkpointInterval bytes, and when
// the layer's stream fails. A later stage of that blob, in the same pull's
// retry or in any later pull of any image with that blob, feeds the unpack
// the partial file's first <offset> bytes, hashing them as they are read,
// and fetches only the rest (resume.go). A prefix whose hash is not the
// checkpoint's is dropped and the blob fetched from zero. The file is
// removed once the layer is staged with both digests verified, or when the
// layer's digests do not match.
//
// The files are bounded: at most Config.PartialMaxBytes in all (the oldest
// dropped first), and removed after Config.PartialTTL without a write;
// collected at start, after every pull and every partialCollectPeriod.

// PartialDir is where partial layer downloads are kept, under the graph
// root (internal/doctor, which does not link the image store, repeats it).
const PartialDir = "podbay-partial"

// Defaults of Config.PartialMaxBytes and Config.PartialTTL.
const (
	DefaultPartialMaxBytes = 10 << 30
	DefaultPartialTTL      = 24 * time.Hour
)

// partialCheckpointEvery is the most bytes a partial file grows between
// two checkpoints (an fdatasync and a checkpoint file each): what a
// SIGKILL may lose of a large layer. A smaller layer checkpoints every
// 32nd of its size (at least every MiB), so that a kill loses at most 3 %
// of it.
var partialCheckpointEvery int64 = 32 << 20

// checkpointInterval is the checkpoint interval of a blob of size bytes.
func checkpointInterval(size int64) int64 {
	return min(max(size/32, 1<<20), partialCheckpointEvery)
}

// partialCheckpointSuffix names a partial file's checkpoint.
const partialCheckpointSuffix = ".json"

// partialCheckpoint is what a checkpoint file holds.
type partialCheckpoint struct {
	// Size is the blob's size; Offset how many of its first bytes the
	// partial file holds, and SHA256 (hex) their digest.
	Size   int64  `json:"size"`
	Offset int64  `json:"offset"`
	SHA256 string `json:"sha256"`
}

// partialStore keeps the partial files of one graph root.
type partialStore struct {
	dir      string
	maxBytes int64 // 0: nothing is kept
	ttl      time.Duration

	mu      sync.Mutex
	active  map[string]bool // guarded by mu; files a stage is using
	used    int64           // guarded by mu; bytes of every partial file
	timer   *time.Timer     // guarded by mu; the next periodic collection
	stopped bool            // guarded by mu
}

// partialCollectPeriod is how often the partial files are collected
// besides at start and after every pull: a quarter of the TTL, between a
// minute and an hour.
func partialCollectPeriod(ttl time.Duration) time.Duration {
	return min(max(ttl/4, time.Minute), time.Hour)
}

// startCollector collects every partialCollectPeriod until stopCollector.
func (ps *partialStore) startCollector(ctx context.Context) {
	if ps.maxBytes == 0 {
		return
	}
	period := partialCollectPeriod(ps.ttl)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.timer = time.AfterFunc(period, func() {
		ps.collect(ctx, time.Now())
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if !ps.stopped {
			ps.timer.Reset(period)
		}
	})
}

func (ps *partialStore) stopCollector() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.stopped = true
	if ps.timer != nil {
		ps.timer.Stop()
	}
}

func newPartialStore(ctx context.Context, graphRoot string, maxBytes int64, ttl time.Duration) *partialStore {
	ps := &partialStore{dir: filepath.Join(graphRoot, PartialDir), maxBytes: maxBytes, ttl: ttl, active: map[string]bool{}}
	if maxBytes == 0 {
		if err := os.RemoveAll(ps.dir); err != nil {
			log.G(ctx).Warn("remove partial layer downloads", "dir", ps.dir, "err", err)
		}
		return ps
	}
	if err := os.MkdirAll(ps.dir, 0o700); err != nil {
		log.G(ctx).Warn("partial layer downloads not kept", "dir", ps.dir, "err", err)
		ps.maxBytes = 0
	}
	ps.collect(ctx, time.Now())
	return ps
}

// partialName is blob's file name in the store.
func partialName(blob digest.Digest) string {
	return blob.Algorithm().String() + "-" + blob.Encoded()
}

// partialInfo describes one partial file.
type partialInfo struct {
	Name     string
	Bytes    int64
	Modified time.Time
}

// listPartials lists the partial layer downloads under graphRoot, oldest
// first. A missing directory is no partial file.
func listPartials(graphRoot string) ([]partialInfo, error) {
	entries, err := os.ReadDir(filepath.Join(graphRoot, PartialDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []partialInfo
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), partialCheckpointSuffix) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		st, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, partialInfo{Name: e.Name(), Bytes: st.Size(), Modified: st.ModTime()})
	}
	slices.SortFunc(out, func(a, b partialInfo) int { return a.Modified.Compare(b.Modified) })
	return out, nil
}

// collect removes what is past the TTL, checkpoint files without data (and
// data without checkpoint), and the oldest files while the total is over
// the bound; files in use are left alone. It recounts the bytes used.
func (ps *partialStore) collect(ctx context.Context, now time.Time) {
	if ps.maxBytes == 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	entries, err := os.ReadDir(ps.dir)
	if err != nil {
		log.G(ctx).Warn("list partial layer downloads", "dir", ps.dir, "err", err)
		return
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	for _, e := range entries {
		name := e.Name()
		base := strings.TrimPrefix(strings.TrimSuffix(name, partialCheckpointSuffix), ".")
		orphan := (name != base && !names[base]) || (name == base && !names[base+partialCheckpointSuffix])
		if strings.HasPrefix(name, ".") || orphan {
			if !ps.active[base] {
				_ = os.Remove(filepath.Join(ps.dir, name))
			}
		}
	}
	files, err := listPartials(filepath.Dir(ps.dir))
	if err != nil {
		log.G(ctx).Warn("list partial layer downloads", "dir", ps.dir, "err", err)
		return
	}
	ps.used = 0
	var kept []partialInfo
	for _, f := range files {
		if !ps.active[f.Name] && now.Sub(f.Modified) > ps.ttl {
			log.G(ctx).Info("removed partial layer download past its TTL", "blob", f.Name, "bytes", f.Bytes)
			ps.removeLocked(f.Name, 0)
			continue
		}
		ps.used += f.Bytes
		kept = append(kept, f)
	}
	ps.evictLocked(ctx, kept, 0)
}

// evictLocked drops the oldest files not in use until need more bytes fit
// under the bound; it reports whether they do.
func (ps *partialStore) evictLocked(ctx context.Context, files []partialInfo, need int64) bool {
	for _, f := range files {
		if ps.used+need <= ps.maxBytes {
			break
		}
		if ps.active[f.Name] {
			continue
		}
		log.G(ctx).Info("removed partial layer download: partial_max_bytes reached", "blob", f.Name, "bytes", f.Bytes)
		ps.removeLocked(f.Name, f.Bytes)
	}
	return ps.used+need <= ps.maxBytes
}

// reserve accounts for n more bytes of a partial file, dropping the oldest
// others if needed; false: they do not fit.
func (ps *partialStore) reserve(ctx context.Context, n int64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.used+n <= ps.maxBytes {
		ps.used += n
		return true
	}
	files, err := listPartials(filepath.Dir(ps.dir))
	if err != nil || !ps.evictLocked(ctx, files, n) {
		return false
	}
	ps.used += n
	return true
}

// removeLocked removes name's file and checkpoint; size is what the file
// counted in used.
func (ps *partialStore) removeLocked(name string, size int64) {
	_ = os.Remove(filepath.Join(ps.dir, name+partialCheckpointSuffix))
	_ = os.Remove(filepath.Join(ps.dir, name))
	ps.used = max(ps.used-size, 0)
}

// acquire opens blob's partial file for one stage of it, with the prefix
// its checkpoint vouches for; nil when nothing is kept for it (keeping
// disabled, a blob of unknown size, or another stage of the same blob in
// flight, which then streams as before).
func (ps *partialStore) acquire(ctx context.Context, blob digest.Digest, size int64) *partialFile {
	if ps == nil || ps.maxBytes == 0 || size <= 0 {
		return nil
	}
	name := partialName(blob)
	ps.mu.Lock()
	if ps.active[name] {
		ps.mu.Unlock()
		return nil
	}
	ps.active[name] = true
	ps.mu.Unlock()
	pf, err := ps.open(name, size)
	if err != nil {
		log.G(ctx).Warn("partial layer download not kept", "blob", blob, "err", err)
		ps.release(name)
		return nil
	}
	if pf.prefix > 0 {
		log.G(ctx).Info("resuming layer download", "blob", blob, "offset", pf.prefix, "size", size)
	}
	return pf
}

func (ps *partialStore) release(name string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.active, name)
}

// open opens name's file and reads its checkpoint: a checkpoint for
// another size, past the file's end, or unreadable is no prefix.
func (ps *partialStore) open(name string, size int64) (*partialFile, error) {
	path := filepath.Join(ps.dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	pf := &partialFile{ps: ps, name: name, size: size, f: f, h: sha256.New(), keep: true, onDisk: st.Size()}
	var cp partialCheckpoint
	raw, err := os.ReadFile(path + partialCheckpointSuffix)
	if err == nil && json.Unmarshal(raw, &cp) == nil && cp.Size == size && cp.Offset > 0 &&
		cp.Offset < size && cp.Offset <= st.Size() && len(cp.SHA256) == sha256.Size*2 {
		pf.prefix, pf.want = cp.Offset, cp.SHA256
	}
	if err := pf.truncate(pf.prefix); err != nil {
		_ = f.Close()
		return nil, err
	}
	pf.synced = pf.prefix
	return pf, nil
}

// partialFile is one blob's partial file while a stage uses it. Reads and
// writes may come from the unpack's goroutines while the stage ends it:
// mu serializes them, and nothing is written once it is finished.
type partialFile struct {
	ps   *partialStore
	name string
	size int64 // the blob's

	mu     sync.Mutex
	f      *os.File
	h      hash.Hash // SHA-256 of the file's first n bytes
	n      int64     // bytes hashed: read as prefix or written
	prefix int64     // the checkpointed prefix this attempt reads
	want   string    // its digest (hex)
	synced int64     // the last checkpoint's offset
	onDisk int64     // the file's size, as counted in ps.used
	keep   bool      // false once a write failed or the bound was reached
	done   bool
}

// errPartialCorrupt: the partial file's prefix is not what its checkpoint
// says; it is dropped and the blob fetched from zero.
var errPartialCorrupt = errors.New("partial layer download does not match its checkpoint")

// readPrefix reads the prefix at off into p (at most to the prefix's
// end), hashing it; at its end the hash must be the checkpoint's.
func (pf *partialFile) readPrefix(p []byte, off int64) (int, error) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.done || off != pf.n {
		return 0, errLayerStreamClosed
	}
	p = p[:min(int64(len(p)), pf.prefix-off)]
	n, err := pf.f.ReadAt(p, off)
	pf.h.Write(p[:n])
	pf.n += int64(n)
	if err != nil && n < len(p) {
		return n, fmt.Errorf("%w: reading it: %w", errPartialCorrupt, err)
	}
	if pf.n == pf.prefix && hex.EncodeToString(pf.h.Sum(nil)) != pf.want {
		return n, errPartialCorrupt
	}
	return n, nil
}

// prefixLen is the prefix the next attempt reads.
func (pf *partialFile) prefixLen() int64 {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return pf.prefix
}

// readAt reads the file's bytes at off, which must be in the prefix.
func (pf *partialFile) readAt(p []byte, off int64) error {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.done || off+int64(len(p)) > pf.prefix {
		return errLayerStreamClosed
	}
	_, err := pf.f.ReadAt(p, off)
	return err
}

// append writes the network's bytes p, which start at off, after the
// prefix; a checkpoint follows every checkpointInterval bytes. A
// failure only stops the keeping.
func (pf *partialFile) append(ctx context.Context, p []byte, off int64) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.done || !pf.keep || off != pf.n || len(p) == 0 {
		return
	}
	if grow := off + int64(len(p)) - pf.onDisk; grow > 0 {
		if !pf.ps.reserve(ctx, grow) {
			pf.keep = false
			return
		}
		pf.onDisk += grow
	}
	if _, err := pf.f.WriteAt(p, off); err != nil {
		log.G(ctx).Debug("partial layer download: write", "blob", pf.name, "err", err)
		pf.keep = false
		return
	}
	pf.h.Write(p)
	pf.n += int64(len(p))
	if pf.n-pf.synced >= checkpointInterval(pf.size) {
		pf.checkpointLocked(ctx)
	}
}

// checkpointLocked makes the file's first n bytes durable, then records
// them in the checkpoint file (written aside and renamed).
func (pf *partialFile) checkpointLocked(ctx context.Context) {
	if pf.n <= pf.synced || pf.n >= pf.size {
		return
	}
	if err := unix.Fdatasync(int(pf.f.Fd())); err != nil {
		log.G(ctx).Debug("partial layer download: sync", "blob", pf.name, "err", err)
		pf.keep = false
		return
	}
	raw, err := json.Marshal(partialCheckpoint{Size: pf.size, Offset: pf.n, SHA256: hex.EncodeToString(pf.h.Sum(nil))})
	if err != nil {
		return
	}
	path := filepath.Join(pf.ps.dir, pf.name+partialCheckpointSuffix)
	tmp := filepath.Join(pf.ps.dir, "."+pf.name+partialCheckpointSuffix)
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		_ = os.Remove(tmp)
		pf.keep = false
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		pf.keep = false
		return
	}
	pf.synced = pf.n
}

// rewind prepares the next attempt of the stage: what the file holds is
// checkpointed and becomes the prefix to read, from the start; fromZero
// drops it instead.
func (pf *partialFile) rewind(ctx context.Context, fromZero bool) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if fromZero || pf.n < pf.prefix {
		// The prefix was not read to its end (and so not verified).
		pf.n, pf.synced = 0, 0
		_ = pf.truncate(0)
		_ = os.Remove(filepath.Join(pf.ps.dir, pf.name+partialCheckpointSuffix))
	} else {
		pf.checkpointLocked(ctx)
	}
	pf.prefix, pf.want = 0, ""
	if pf.synced > 0 {
		pf.prefix, pf.want = pf.synced, hex.EncodeToString(pf.h.Sum(nil))
		if pf.n != pf.synced {
			// The last checkpoint failed: only what it vouches for stays.
			pf.prefix, pf.want = 0, ""
			_ = pf.truncate(0)
			pf.synced = 0
		}
	}
	_ = pf.truncate(pf.prefix)
	pf.h.Reset()
	pf.n = 0
}

// truncate cuts the file to size and accounts for it.
func (pf *partialFile) truncate(size int64) error {
	if size >= pf.onDisk {
		return nil
	}
	if err := pf.f.Truncate(size); err != nil {
		return err
	}
	pf.ps.mu.Lock()
	pf.ps.used = max(pf.ps.used-(pf.onDisk-size), 0)
	pf.ps.mu.Unlock()
	pf.onDisk = size
	return nil
}

// finish ends the stage's use of the file: verified (the layer staged) or
// wrong (its digests do not match) removes it; anything else checkpoints
// what it holds for a later pull.
func (pf *partialFile) finish(ctx context.Context, remove bool) {
	if pf == nil {
		return
	}
	pf.mu.Lock()
	if !remove {
		// An attempt that had not yet read (and verified) the whole
		// prefix leaves the checkpoint on disk as it stands; past a
		// failed checkpoint, the older one does (open truncates the file
		// to it).
		if pf.n >= pf.prefix {
			pf.checkpointLocked(ctx)
		}
		remove = pf.synced == 0
	}
	pf.done = true
	_ = pf.f.Close()
	pf.mu.Unlock()
	if remove {
		pf.ps.mu.Lock()
		pf.ps.removeLocked(pf.name, pf.onDisk)
		pf.ps.mu.Unlock()
	} else if pf.synced > 0 {
		log.G(ctx).Info("kept partial layer download", "blob", pf.name, "bytes", pf.synced, "size", pf.size)
	}
	pf.ps.release(pf.name)
}
