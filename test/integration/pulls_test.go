package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/pullprogress"
	"github.com/podbay/podbay/test/testimage"
)

// podbayPulls runs `podbay pulls --json` against e's daemon.
func (e *env) podbayPulls(t *testing.T) pullprogress.Snapshot {
	t.Helper()
	out, err := exec.Command(bin("podbay"), "--socket", e.sock, "pulls", "--json").Output()
	if err != nil {
		t.Fatalf("podbay pulls --json: %v\n%s", err, exitStderr(err))
	}
	var s pullprogress.Snapshot
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("podbay pulls --json output: %v\n%s", err, out)
	}
	return s
}

// pullOf is the pull of ref in s; ok false when there is none.
func pullOf(s pullprogress.Snapshot, ref string) (pullprogress.Pull, bool) {
	for _, p := range s.Pulls {
		if p.ImageRef == ref {
			return p, true
		}
	}
	return pullprogress.Pull{}, false
}

// blobHold is a proxy in front of a registry that sends the first half of
// the first blob larger than 64 KiB (a layer, not the config) and holds
// the rest until released.
type blobHold struct {
	addr     string
	held     chan struct{} // closed once half the blob is sent
	release  chan struct{}
	once     sync.Once // the first large blob
	freeOnce sync.Once
}

func startBlobHold(t *testing.T, upstream string) *blobHold {
	t.Helper()
	h := &blobHold{held: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		up, err := http.NewRequestWithContext(req.Context(), req.Method, "http://"+upstream+req.URL.RequestURI(), nil)
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
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") && resp.ContentLength > 64<<10 {
			first := false
			h.once.Do(func() { first = true })
			if first {
				if _, err := io.CopyN(w, resp.Body, resp.ContentLength/2); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				close(h.held)
				select {
				case <-h.release:
				case <-req.Context().Done():
					return
				}
			}
		}
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { h.free() })
	h.addr = strings.TrimPrefix(srv.URL, "http://")
	return h
}

// free lets the held blob go on.
func (h *blobHold) free() { h.freeOnce.Do(func() { close(h.release) }) }

// TestPodbayPulls: while the registry holds a blob half sent, `podbay
// pulls` shows the pull in flight with the bytes received so far; once it
// is released and the pull is done, no pull is in flight and the finished
// one has every byte of its layers, and `podbay pulls --watch` to a pipe
// prints one table and ends.
func TestPodbayPulls(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	hold := startBlobHold(t, r.Addr())
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr()) + insecureRegistry(hold.addr)})
	push(t, r, defaultSpec(t, "test", "busybox"))
	e.start("")
	e.waitPauseImage(t)
	ref := hold.addr + "/test/busybox:latest"

	pulled := make(chan error, 1)
	go func() {
		_, err := e.tryPull(rpcCtx(t), ref, nil)
		pulled <- err
	}()
	var held pullprogress.Pull
	if err := eventually(time.Minute, func() error {
		select {
		case <-hold.held:
		default:
			return fmt.Errorf("no blob held half sent")
		}
		p, ok := pullOf(e.podbayPulls(t), ref)
		if !ok || p.State != pullprogress.PullRunning || p.Fetched == 0 {
			return fmt.Errorf("podbay pulls: %+v, want %s in flight with bytes fetched", p, ref)
		}
		held = p
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(held.Layers) == 0 || held.Size <= held.Fetched || held.StartedAt.IsZero() {
		t.Errorf("pull in flight %+v, want layers and fewer bytes fetched than their size", held)
	}
	table, err := exec.Command(bin("podbay"), "--socket", e.sock, "pulls").Output()
	if err != nil || !strings.Contains(string(table), ref) || !strings.Contains(string(table), "pulling") {
		t.Errorf("podbay pulls: %v\n%s", err, table)
	}

	hold.free()
	if err := <-pulled; err != nil {
		t.Fatalf("PullImage %s: %v", ref, err)
	}
	s := e.podbayPulls(t)
	for _, p := range s.Pulls {
		if p.State == pullprogress.PullRunning {
			t.Errorf("after the pull, %s is still in flight", p.ImageRef)
		}
	}
	done, ok := pullOf(s, ref)
	if !ok || done.State != pullprogress.PullDone || done.Fetched != done.Size || done.LayersDone != len(done.Layers) {
		t.Errorf("finished pull %+v, want done with fetched = size and every layer done", done)
	}
	if done.Fetched < held.Fetched {
		t.Errorf("fetched went back from %d to %d", held.Fetched, done.Fetched)
	}
	watch := exec.Command(bin("podbay"), "--socket", e.sock, "pulls", "--watch")
	out, err := watch.Output()
	if err != nil || strings.Count(string(out), "REF") != 1 {
		t.Errorf("podbay pulls --watch with nothing in flight: %v, want one table:\n%s", err, out)
	}
	e.assertNoLeaks(t)
}
