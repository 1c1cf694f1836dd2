package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/types"
)

// blobAnswer is what a cutRegistry does with one GET of its blob.
type blobAnswer struct {
	status int   // non-zero: answer this status, no body
	cutAt  int64 // > 0: reset the connection once the body reached this offset of the blob
	hang   bool  // with cutAt: stop sending there and hold the connection until the client leaves
	// arrived, if set, is closed when the answer reached cutAt.
	arrived chan struct{}
}

// cutRegistry is a hostile registry in front of a testRegistry: it serves
// one blob itself, each GET as the next scripted answer says (past the
// script, as a registry with ranges does), hostile to every ranged GET as
// rangeMode says, and counts the blob's bytes it serves. Everything else
// goes to the testRegistry.
type cutRegistry struct {
	t    testing.TB
	srv  *httptest.Server
	host string
	blob digest.Digest
	data []byte

	mu     sync.Mutex
	script []blobAnswer // guarded by mu
	// rangeMode: "" honours ranges; "ignore" answers 200 with the whole
	// blob; "shift" serves from 1000 bytes past the offset asked for
	// under the Content-Range asked for; "short" ends 1000 bytes early
	// (with a Content-Range and length that say so); "drip" sends one
	// byte every dripEvery.
	rangeMode string        // guarded by mu
	dripEvery time.Duration // guarded by mu
	served    int64         // guarded by mu; blob bytes sent
	ranges    []string      // guarded by mu; the Range headers of the blob's GETs
}

func newCutRegistry(t testing.TB, inner *testRegistry, blob []byte) *cutRegistry {
	c := &cutRegistry{t: t, blob: digest.FromBytes(blob), data: blob}
	target, err := url.Parse(inner.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if m := blobPath.FindStringSubmatch(req.URL.Path); m != nil && m[1] == c.blob.String() &&
			(req.Method == http.MethodGet || req.Method == http.MethodHead) {
			c.serveBlob(w, req)
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(c.srv.Close)
	c.host = strings.TrimPrefix(c.srv.URL, "http://")
	return c
}

func (c *cutRegistry) serveBlob(w http.ResponseWriter, req *http.Request) {
	size := int64(len(c.data))
	w.Header().Set("Docker-Content-Digest", c.blob.String())
	w.Header().Set("Content-Type", "application/octet-stream")
	if req.Method == http.MethodHead {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		return
	}
	c.mu.Lock()
	var ans blobAnswer
	if len(c.script) > 0 {
		ans, c.script = c.script[0], c.script[1:]
	}
	rangeHdr := req.Header.Get("Range")
	c.ranges = append(c.ranges, rangeHdr)
	mode, drip := c.rangeMode, c.dripEvery
	c.mu.Unlock()
	if ans.status != 0 {
		http.Error(w, "scripted failure", ans.status)
		return
	}
	from, end, claim := int64(0), size, int64(0)
	status := http.StatusOK
	if rangeHdr != "" && mode != "ignore" {
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(rangeHdr, "bytes="), "-"), 10, 64)
		if err != nil || n >= size {
			http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		from, claim, status = n, n, http.StatusPartialContent
		switch mode {
		case "shift":
			from = min(n+1000, size)
		case "short":
			end = size - 1000
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", claim, claim+(end-from)-1, size))
	}
	w.Header().Set("Content-Length", fmt.Sprint(end-from))
	w.WriteHeader(status)
	c.send(w, req, ans, from, end, mode == "drip" && rangeHdr != "", drip)
}

// send writes data[from:end], as ans and drip say.
func (c *cutRegistry) send(w http.ResponseWriter, req *http.Request, ans blobAnswer, from, end int64, drip bool, every time.Duration) {
	flusher := w.(http.Flusher)
	for off := from; off < end; {
		n := min(end-off, 32<<10)
		if drip {
			n = 1
		}
		if ans.cutAt > 0 && off+n > ans.cutAt {
			n = ans.cutAt - off
		}
		if n > 0 {
			if _, err := w.Write(c.data[off : off+n]); err != nil {
				return
			}
			flusher.Flush()
			c.mu.Lock()
			c.served += n
			c.mu.Unlock()
			off += n
		}
		if ans.cutAt > 0 && off >= ans.cutAt {
			if ans.arrived != nil {
				close(ans.arrived)
			}
			if ans.hang {
				<-req.Context().Done()
			}
			panic(http.ErrAbortHandler) // the connection is reset mid-body
		}
		if drip {
			select {
			case <-time.After(every):
			case <-req.Context().Done():
				return
			}
		}
	}
}

func (c *cutRegistry) setScript(answers ...blobAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.script = answers
}

func (c *cutRegistry) setRangeMode(mode string, every time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rangeMode, c.dripEvery = mode, every
}

// takeServed returns the blob bytes served since the last call and the
// Range headers of the GETs.
func (c *cutRegistry) takeServed() (int64, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, r := c.served, c.ranges
	c.served, c.ranges = 0, nil
	return n, r
}

func (c *cutRegistry) ref(repo string) string { return c.host + "/" + repo }

// bigLayer is a gzip layer of one file of random bytes (which do not
// compress) of about size bytes.
func bigLayer(t testing.TB, size int) rawLayer {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "blob", Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return gzipLayer(t, buf.Bytes())
}

// resumeSetup pushes an image of a small layer and a big one, and puts a
// cutRegistry in front of the big one's blob. Checkpoints come every MiB
// and retries after 10 ms.
func resumeSetup(t *testing.T, mods ...func(*Config)) (*testEnv, *cutRegistry, rawLayer, string) {
	t.Helper()
	requireRoot(t)
	reg := newRegistry(t)
	small := gzipLayer(t, multiLayerTars(t)[0])
	big := bigLayer(t, 8<<20)
	_, id := reg.pushRaw("test/big:1", small, big)
	cut := newCutRegistry(t, reg, big.blob)
	e := newEnv(t, mods...)
	e.insecure(cut.host)
	e.store.retryBase = 10 * time.Millisecond
	old := partialCheckpointEvery
	partialCheckpointEvery = 1 << 20
	t.Cleanup(func() { partialCheckpointEvery = old })
	return e, cut, big, id
}

// pullAndCheck pulls the image and checks it is the image pushed, with the
// big layer's digests, and that no partial file is left.
func (e *testEnv) pullAndCheck(t *testing.T, cut *cutRegistry, big rawLayer, id string) {
	t.Helper()
	img, err := e.store.Pull(testCtx(t), cut.ref("test/big:1"), nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if img.ID != id {
		t.Fatalf("image ID %s, want %s", img.ID, id)
	}
	stored, err := e.store.store.Image(img.ID)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := e.store.store.Layer(stored.TopLayer)
	if err != nil {
		t.Fatal(err)
	}
	if layer.UncompressedDigest != big.diffID || layer.CompressedDigest != digest.FromBytes(big.blob) {
		t.Errorf("top layer digests %s, %s; want %s, %s", layer.UncompressedDigest, layer.CompressedDigest, big.diffID, digest.FromBytes(big.blob))
	}
	e.store.pullsDone.Wait()
	if left, _ := listPartials(e.store.store.GraphRoot()); len(left) != 0 {
		t.Errorf("partial files left after the pull: %v", left)
	}
}

// atMost fails unless served is at most 1.1 times the blob's size.
func atMost(t *testing.T, served int64, ranges []string, blob []byte) {
	t.Helper()
	if limit := int64(len(blob)) * 11 / 10; served > limit {
		t.Errorf("served %d bytes of a %d-byte blob in all (GETs with Range %q), want at most %d", served, len(blob), ranges, limit)
	}
}

// A connection reset mid-blob (at half and at 90 %) whose reconnection
// (containers/image's own, with a Range) gets a 503 is retried within the
// pull, from where it was.
func TestResumeAfterReset(t *testing.T) {
	for _, percent := range []int64{50, 90} {
		t.Run(fmt.Sprint(percent), func(t *testing.T) {
			e, cut, big, id := resumeSetup(t)
			cut.setScript(blobAnswer{cutAt: int64(len(big.blob)) * percent / 100}, blobAnswer{status: http.StatusServiceUnavailable})
			e.pullAndCheck(t, cut, big, id)
			served, ranges := cut.takeServed()
			atMost(t, served, ranges, big.blob)
			if len(ranges) != 3 || ranges[0] != "" || ranges[2] == "" {
				t.Errorf("GETs with Range %q, want the cut one, the library's reconnection and a ranged one", ranges)
			}
			t.Logf("served %d bytes of a %d-byte blob (%.3fx)", served, len(big.blob), float64(served)/float64(len(big.blob)))
		})
	}
}

// A registry's 5xx before the blob is retried.
func TestResumeAfter5xx(t *testing.T) {
	e, cut, big, id := resumeSetup(t)
	cut.setScript(blobAnswer{status: http.StatusInternalServerError}, blobAnswer{status: http.StatusBadGateway})
	e.pullAndCheck(t, cut, big, id)
	served, ranges := cut.takeServed()
	if served != int64(len(big.blob)) || len(ranges) != 3 {
		t.Errorf("served %d bytes in %d GETs, want %d in 3", served, len(ranges), len(big.blob))
	}
}

// failFirstPull cuts the big blob at half and holds the connection: the
// pull is cancelled there (as by the kubelet's deadline), which leaves the
// partial file.
func failFirstPull(t *testing.T, e *testEnv, cut *cutRegistry, big rawLayer) {
	t.Helper()
	arrived := make(chan struct{})
	cut.setScript(blobAnswer{cutAt: int64(len(big.blob)) / 2, hang: true, arrived: arrived})
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Pull(ctx, cut.ref("test/big:1"), nil)
		done <- err
	}()
	<-arrived
	// The bytes are in podbayd once they were read: wait for the partial
	// file to have them.
	name := partialName(digest.FromBytes(big.blob))
	waitFor(t, "the partial file to grow", func() bool {
		st, err := os.Stat(filepath.Join(e.store.partials.dir, name))
		return err == nil && st.Size() >= int64(len(big.blob))/2-(256<<10)
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Pull = %v, want context.Canceled", err)
	}
	e.store.pullsDone.Wait()
	left, err := listPartials(e.store.store.GraphRoot())
	if err != nil || len(left) != 1 || left[0].Bytes < int64(len(big.blob))/4 {
		t.Fatalf("partial files after the cancelled pull: %v, %v; want the big blob's", left, err)
	}
}

// A pull cancelled mid-blob leaves its bytes; the next pull fetches only
// the rest.
func TestResumeAcrossPulls(t *testing.T) {
	e, cut, big, id := resumeSetup(t)
	failFirstPull(t, e, cut, big)
	e.pullAndCheck(t, cut, big, id)
	served, ranges := cut.takeServed()
	atMost(t, served, ranges, big.blob)
}

// Kept bytes corrupted on disk are not used: the blob is fetched from zero.
func TestResumeCorruptPartial(t *testing.T) {
	e, cut, big, id := resumeSetup(t)
	failFirstPull(t, e, cut, big)
	cut.takeServed()
	path := filepath.Join(e.store.partials.dir, partialName(digest.FromBytes(big.blob)))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 1<<20+17); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, 1<<20+17); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.pullAndCheck(t, cut, big, id)
	if served, ranges := cut.takeServed(); served != int64(len(big.blob)) || len(ranges) != 1 || ranges[0] != "" {
		t.Errorf("served %d bytes in GETs with Range %q, want the whole blob once", served, ranges)
	}
}

// Kept bytes that match their checkpoint but are not the blob's (a mirror
// sent them wrong) fail the digests once resumed: the layer is fetched
// once more from zero.
func TestResumeWrongKeptBytes(t *testing.T) {
	e, cut, big, id := resumeSetup(t)
	failFirstPull(t, e, cut, big)
	cut.takeServed()
	path := filepath.Join(e.store.partials.dir, partialName(digest.FromBytes(big.blob)))
	raw, err := os.ReadFile(path + partialCheckpointSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var cp partialCheckpoint
	if err := json.Unmarshal(raw, &cp); err != nil {
		t.Fatal(err)
	}
	kept := make([]byte, cp.Offset)
	copy(kept, big.blob)
	kept[cp.Offset/2] ^= 0x40
	sum := sha256.Sum256(kept)
	cp.SHA256 = hex.EncodeToString(sum[:])
	if raw, err = json.Marshal(cp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, kept, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+partialCheckpointSuffix, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e.pullAndCheck(t, cut, big, id)
	if _, ranges := cut.takeServed(); len(ranges) < 2 || ranges[0] == "" || ranges[len(ranges)-1] != "" {
		t.Errorf("GETs with Range %q, want a ranged one, then one from zero", ranges)
	}
}

// Hostile answers to the ranged GET are refused and the blob fetched from
// zero; a registry without ranges serves it whole.
func TestResumeHostileRange(t *testing.T) {
	for _, mode := range []string{"shift", "short", "ignore"} {
		t.Run(mode, func(t *testing.T) {
			e, cut, big, id := resumeSetup(t)
			failFirstPull(t, e, cut, big)
			cut.takeServed()
			cut.setRangeMode(mode, 0)
			e.pullAndCheck(t, cut, big, id)
			served, ranges := cut.takeServed()
			if served > 2*int64(len(big.blob)) || len(ranges) == 0 || ranges[0] == "" {
				t.Errorf("served %d bytes in GETs with Range %q", served, ranges)
			}
		})
	}
}

// A resumed fetch whose registry drips slower than the stall timeout is
// still cancelled by it; the bytes stay for the next pull.
func TestResumeDripStalls(t *testing.T) {
	e, cut, big, id := resumeSetup(t, func(c *Config) { c.PullProgressTimeout = 2 * time.Second })
	failFirstPull(t, e, cut, big)
	cut.setRangeMode("drip", 10*time.Second)
	_, err := e.store.Pull(testCtx(t), cut.ref("test/big:1"), nil)
	var stall *ProgressTimeoutError
	if !errors.As(err, &stall) {
		t.Fatalf("Pull = %v, want a ProgressTimeoutError", err)
	}
	e.store.pullsDone.Wait()
	if left, _ := listPartials(e.store.store.GraphRoot()); len(left) != 1 {
		t.Fatalf("partial files after the stalled pull: %v", left)
	}
	cut.setRangeMode("", 0)
	e.pullAndCheck(t, cut, big, id)
}

// The partial files are bounded by size and age; checkpoints without data
// and data without checkpoints are removed; a file in use stays.
func TestPartialGC(t *testing.T) {
	ctx := testCtx(t)
	root := t.TempDir()
	ps := newPartialStore(ctx, root, 3<<20, time.Hour)
	now := time.Now()
	write := func(name string, size int, age time.Duration, checkpoint bool) {
		path := filepath.Join(ps.dir, name)
		if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if checkpoint {
			if err := os.WriteFile(path+partialCheckpointSuffix, []byte(`{}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(path, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	write("sha256-expired", 1<<10, 2*time.Hour, true)
	write("sha256-oldest", 1<<20, 30*time.Minute, true)
	write("sha256-older", 1<<20, 20*time.Minute, true)
	write("sha256-inuse", 1<<20, 25*time.Minute, true)
	write("sha256-new", 1<<20, time.Minute, true)
	write("sha256-nocheckpoint", 1<<10, time.Minute, false)
	if err := os.WriteFile(filepath.Join(ps.dir, "sha256-nodata.json"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ps.active["sha256-inuse"] = true
	left := func() string {
		var names []string
		files, err := listPartials(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			names = append(names, f.Name)
		}
		return strings.Join(names, " ")
	}
	// Under the bound: the TTL and the orphans.
	ps.maxBytes = 100 << 20
	ps.collect(ctx, now)
	if got, want := left(), "sha256-oldest sha256-inuse sha256-older sha256-new"; got != want {
		t.Errorf("left after collection: %s, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(ps.dir, "sha256-nodata.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a checkpoint without data stayed: %v", err)
	}
	// Over it: the oldest not in use goes.
	ps.maxBytes = 3 << 20
	ps.collect(ctx, now)
	if got, want := left(), "sha256-inuse sha256-older sha256-new"; got != want {
		t.Errorf("left after collection: %s, want %s", got, want)
	}
	if ps.used != 3<<20 {
		t.Errorf("used %d, want %d", ps.used, 3<<20)
	}
}

// A pull keeps no more than PartialMaxBytes of a blob, and resumes from
// what it kept.
func TestResumeBounded(t *testing.T) {
	e, cut, big, id := resumeSetup(t, func(c *Config) { c.PartialMaxBytes = 2 << 20 })
	cut.setScript(blobAnswer{cutAt: int64(len(big.blob)) / 2}, blobAnswer{status: http.StatusServiceUnavailable})
	e.pullAndCheck(t, cut, big, id)
	served, ranges := cut.takeServed()
	if len(ranges) != 3 {
		t.Fatalf("GETs with Range %q, want 3", ranges)
	}
	from, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(ranges[2], "bytes="), "-"), 10, 64)
	if err != nil || from+rangeOverlap > 2<<20 || from+rangeOverlap < 1<<20 {
		t.Fatalf("the resumed GET's Range %q (%v), want it from under 2 MiB", ranges[2], err)
	}
	if want := int64(len(big.blob))/2 + int64(len(big.blob)) - from; served != want {
		t.Errorf("served %d bytes, want %d", served, want)
	}
}

// TestGetBlobAtShape: containers/image's docker source still has the
// GetBlobAt getBlobFrom calls, and it returns the blob's bytes from the
// offset asked for.
func TestGetBlobAtShape(t *testing.T) {
	e, cut, big, _ := resumeSetup(t)
	named, err := reference.ParseNormalizedNamed(cut.ref("test/big:1"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := docker.NewReference(named)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := e.store.systemContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, _, err := getBlobAtMethod(src); err != nil {
		t.Fatalf("containers/image changed: %v", err)
	}
	info := types.BlobInfo{Digest: digest.FromBytes(big.blob), Size: int64(len(big.blob))}
	for _, mode := range []string{"", "ignore"} {
		cut.setRangeMode(mode, 0)
		rc, err := getBlobFrom(ctx, src, info, 12345)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(rc)
		rc.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), big.blob[12345:]) {
			t.Errorf("range mode %q: got %d bytes (%v), want the %d from offset 12345", mode, buf.Len(), err, len(big.blob)-12345)
		}
	}
}
