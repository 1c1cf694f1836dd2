package image

import (
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/podbay/podbay/internal/pullprogress"
)

// midBlobPause is a proxy in front of a registry that sends the first half
// of one blob, then holds the rest until released.
type midBlobPause struct {
	srv     *httptest.Server
	host    string
	paused  chan struct{} // closed once half the blob is sent
	release chan struct{} // closing it sends the rest
}

func newMidBlobPause(t *testing.T, upstream, blob string) *midBlobPause {
	p := &midBlobPause{paused: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		up, err := http.NewRequestWithContext(req.Context(), req.Method, upstream+req.URL.RequestURI(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		up.Header = req.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(up)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/blobs/"+blob) {
			if _, err := io.CopyN(w, resp.Body, resp.ContentLength/2); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			once.Do(func() { close(p.paused) })
			select {
			case <-p.release:
			case <-req.Context().Done():
				return
			}
		}
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(p.srv.Close)
	p.host = strings.TrimPrefix(p.srv.URL, "http://")
	return p
}

// A real pull's snapshots, taken all along it and while a blob is held
// half sent, never go back and reach the totals: during the hold the
// pull is in flight with exactly half the blob fetched; at the end it is
// done, every layer fetched in full and unpacked.
func TestPullProgressSnapshots(t *testing.T) {
	reg := newRegistry(t)
	big := make([]byte, 2<<20) // random: the gzip blob is as large
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	layers := []rawLayer{
		gzipLayer(t, testTar(t, fileEntry("small", "a small file", 0))),
		gzipLayer(t, testTar(t, fileEntry("big", string(big), 0))),
		zstdLayer(t, testTar(t, fileEntry("other", "another", 0))),
	}
	reg.pushRaw("test/progress:1", layers...)
	bigDigest := digest.FromBytes(layers[1].blob).String()
	proxy := newMidBlobPause(t, reg.srv.URL, bigDigest)
	e := newEnv(t)
	e.insecure(proxy.host)
	ref := proxy.host + "/test/progress:1"

	var snaps []pullprogress.Pull
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			default:
			}
			if s := e.store.Pulls(); len(s.Pulls) > 0 && s.Pulls[0].State == pullprogress.PullRunning {
				snaps = append(snaps, s.Pulls[0])
			}
			time.Sleep(time.Millisecond)
		}
	}()
	pulled := make(chan error, 1)
	go func() {
		_, err := e.store.Pull(testCtx(t), ref, nil)
		pulled <- err
	}()
	select {
	case <-proxy.paused:
	case err := <-pulled:
		t.Fatalf("the pull ended before the blob was held: %v", err)
	}
	half := int64(len(layers[1].blob)) / 2
	held := waitForPull(t, e, func(p pullprogress.Pull) bool {
		return len(p.Layers) == 3 && p.Layers[1].Fetched >= half
	})
	if l := held.Layers[1]; l.Fetched != half || l.State != pullprogress.LayerFetching || l.Size != int64(len(layers[1].blob)) {
		t.Errorf("held layer %+v, want fetching with exactly %d of %d bytes", l, half, len(layers[1].blob))
	}
	if held.State != pullprogress.PullRunning || held.ImageRef != ref || held.Engine != pullprogress.EngineOnePass {
		t.Errorf("held pull %+v", held)
	}
	close(proxy.release)
	if err := <-pulled; err != nil {
		t.Fatal(err)
	}
	close(stopSampling)
	<-sampled
	final := e.store.Pulls()
	if len(final.Pulls) != 1 || final.Pulls[0].State != pullprogress.PullDone {
		t.Fatalf("after the pull: %+v, want it finished", final.Pulls)
	}
	done := final.Pulls[0]
	snaps = append(snaps, done)
	if len(snaps) < 3 {
		t.Fatalf("%d snapshots taken during the pull", len(snaps))
	}
	for i := 1; i < len(snaps); i++ {
		requireMonotonic(t, snaps[i-1], snaps[i])
	}
	var total int64
	for i, l := range done.Layers {
		total += int64(len(layers[i].blob))
		if l.State != pullprogress.LayerDone || l.Fetched != int64(len(layers[i].blob)) || l.Fetched != l.Size || l.Unpacked == 0 {
			t.Errorf("layer %d at the end: %+v, want done with all %d bytes fetched", i, l, len(layers[i].blob))
		}
	}
	if done.Fetched != total || done.Size != total || done.LayersDone != 3 {
		t.Errorf("pull at the end: fetched %d of %d, %d layers done; want %d, 3", done.Fetched, done.Size, done.LayersDone, total)
	}
}

// waitForPull polls the store's only pull in flight until ok holds, for
// at most a minute (a bound, not a timing assertion).
func waitForPull(t *testing.T, e *testEnv, ok func(pullprogress.Pull) bool) pullprogress.Pull {
	t.Helper()
	var last pullprogress.Snapshot
	for range 6000 {
		last = e.store.Pulls()
		if len(last.Pulls) == 1 && last.Pulls[0].State == pullprogress.PullRunning && ok(last.Pulls[0]) {
			return last.Pulls[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the pull never got there: %s", fmt.Sprint(last))
	return pullprogress.Pull{}
}

// A pull by copy.Image is tracked from its progress events: its layers,
// not its config, each fetched in full and done at the end, the figures
// never going back.
func TestPullProgressCopyImage(t *testing.T) {
	reg := newRegistry(t)
	layers := []rawLayer{
		gzipLayer(t, testTar(t, fileEntry("a", "first", 0))),
		gzipLayer(t, testTar(t, fileEntry("b", "second", 0))),
	}
	reg.pushRaw("test/copy:1", layers...)
	e := newEnv(t)
	e.insecure(reg.host)
	e.store.copyPull = true
	var snaps []pullprogress.Pull
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := e.store.Pulls(); len(s.Pulls) > 0 && s.Pulls[0].State == pullprogress.PullRunning && len(s.Pulls[0].Layers) == 2 {
				snaps = append(snaps, s.Pulls[0])
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := e.store.Pull(testCtx(t), reg.ref("test/copy:1"), nil)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	done := e.store.Pulls().Pulls[0]
	snaps = append(snaps, done)
	for i := 1; i < len(snaps); i++ {
		requireMonotonic(t, snaps[i-1], snaps[i])
	}
	if done.Engine != pullprogress.EngineCopy || done.State != pullprogress.PullDone || len(done.Layers) != 2 {
		t.Fatalf("copy.Image pull %+v, want done by copy with 2 layers", done)
	}
	// copy.Image fetches its layers at once: they are listed in the order
	// their downloads began, not the manifest's.
	byDigest := map[string]pullprogress.Layer{}
	for _, l := range done.Layers {
		byDigest[l.Digest] = l
	}
	for i, want := range layers {
		d := digest.FromBytes(want.blob).String()
		if l, ok := byDigest[d]; !ok || l.State != pullprogress.LayerDone || l.Fetched != int64(len(want.blob)) {
			t.Errorf("layer %d (%s): %+v, want done with %d bytes", i, d, l, len(want.blob))
		}
	}
}
