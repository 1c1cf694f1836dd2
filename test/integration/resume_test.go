package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

	"github.com/podbay/podbay/test/testimage"
)

// rangeFront is a registry in front of a testimage registry that serves
// one blob itself, honouring Range requests, counts the blob bytes it
// serves, and can hold a GET once it sent hangAt bytes. Everything else is
// the testimage registry's.
type rangeFront struct {
	addr   string
	digest string
	data   []byte

	mu      sync.Mutex
	served  int64         // guarded by mu
	ranges  []string      // guarded by mu
	hangAt  int64         // guarded by mu; 0: no hold
	arrived chan struct{} // guarded by mu; closed when a GET reached hangAt
}

func startRangeFront(t *testing.T, upstream string, blob []byte) *rangeFront {
	sum := sha256.Sum256(blob)
	f := &rangeFront{digest: "sha256:" + hex.EncodeToString(sum[:]), data: blob}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstream})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/blobs/"+f.digest) {
			f.serve(w, req)
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	f.addr = strings.TrimPrefix(srv.URL, "http://")
	return f
}

func (f *rangeFront) serve(w http.ResponseWriter, req *http.Request) {
	size := int64(len(f.data))
	f.mu.Lock()
	hangAt, arrived := f.hangAt, f.arrived
	f.hangAt = 0
	f.ranges = append(f.ranges, req.Header.Get("Range"))
	f.mu.Unlock()
	from := int64(0)
	w.Header().Set("Docker-Content-Digest", f.digest)
	if r := req.Header.Get("Range"); r != "" {
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(r, "bytes="), "-"), 10, 64)
		if err != nil || n >= size {
			http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		from = n
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, size-1, size))
		w.Header().Set("Content-Length", fmt.Sprint(size-n))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(http.StatusOK)
	}
	for off := from; off < size; {
		n := min(size-off, 64<<10)
		if hangAt > 0 && off+n > hangAt {
			n = hangAt - off
		}
		if n > 0 {
			if _, err := w.Write(f.data[off : off+n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			f.mu.Lock()
			f.served += n
			f.mu.Unlock()
			off += n
		}
		if hangAt > 0 && off >= hangAt {
			close(arrived)
			<-req.Context().Done()
			return
		}
	}
}

// hold makes the next GET of the blob stop after at bytes, until the
// client goes; the channel is closed when it got there.
func (f *rangeFront) hold(at int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hangAt, f.arrived = at, make(chan struct{})
	return f.arrived
}

func (f *rangeFront) stats() (int64, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served, append([]string(nil), f.ranges...)
}

// randomGzipLayer is a gzip-compressed tar of one file of size random
// bytes, which do not compress.
func randomGzipLayer(t *testing.T, size int) []byte {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "weights.bin", Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestResumePullAfterSIGKILL: podbayd SIGKILLed halfway through a 40 MiB
// layer keeps what it had checkpointed; once restarted, the pull fetches
// only the rest (at most 1.1 times the layer in all) and gives the image
// an uninterrupted pull gives.
func TestResumePullAfterSIGKILL(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	layer := randomGzipLayer(t, 40<<20)
	spec := testimage.Spec{Repository: "test/resume", Tags: []string{"1"}, CompressedLayers: [][]byte{layer}}
	push(t, r, spec)
	wantID := criID(t, hostImage(t, spec))
	front := startRangeFront(t, r.Addr(), layer)
	e := newEnv(t, envOptions{registries: insecureRegistry(front.addr)})
	e.start("")
	ref := front.addr + "/test/resume:1"

	half := int64(len(layer)) / 2
	arrived := front.hold(half)
	pulled := make(chan error, 1)
	go func() {
		_, err := e.tryPull(rpcCtx(t), ref, nil)
		pulled <- err
	}()
	<-arrived
	// What a SIGKILL keeps is what the last checkpoint vouches for: wait
	// for one within a checkpoint interval (a 32nd of the layer) of the
	// bytes sent.
	partial := filepath.Join(e.storageRoot, "podbay-partial")
	checkpoint := filepath.Join(partial, "sha256-"+strings.TrimPrefix(front.digest, "sha256:")+".json")
	if err := eventually(time.Minute, func() error {
		raw, err := os.ReadFile(checkpoint)
		var cp struct{ Offset int64 }
		if err == nil {
			err = json.Unmarshal(raw, &cp)
		}
		if err == nil && cp.Offset < half-int64(len(layer))/32-(1<<20) {
			err = fmt.Errorf("checkpoint at %d of %d", cp.Offset, len(layer))
		}
		return err
	}); err != nil {
		t.Fatalf("no checkpoint near the middle of the layer: %v", err)
	}
	e.kill9()
	if err := <-pulled; err == nil {
		t.Fatal("the pull succeeded through a SIGKILL")
	}
	e.start("")
	if id := e.pullImage(t, ref, nil); id != wantID {
		t.Errorf("PullImage after the restart: %s, want %s", id, wantID)
	}
	served, ranges := front.stats()
	if limit := int64(len(layer)) * 11 / 10; served > limit || len(ranges) != 2 || ranges[1] == "" {
		t.Errorf("served %d bytes of a %d-byte layer in GETs with Range %q, want at most %d in two, the second ranged",
			served, len(layer), ranges, limit)
	}
	t.Logf("served %d bytes of a %d-byte layer (%.2fx) in GETs with Range %q", served, len(layer), float64(served)/float64(len(layer)), ranges)
	if left, err := os.ReadDir(partial); err != nil || len(left) != 0 {
		t.Errorf("partial downloads left: %v, %v", left, err)
	}
}
