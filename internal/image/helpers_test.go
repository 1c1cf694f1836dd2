package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/podbay/podbay/internal/log"
)

// testCtx bounds every test operation; no test here should take long.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if _, bench := t.(*testing.B); bench {
		// Benchmark output is read by people and tools: keep logs out.
		ctx = log.WithLogger(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	return ctx
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: containers/storage's overlay driver mounts")
	}
}

// testEnv is a store in a temporary root with its own registries.conf.
type testEnv struct {
	t        testing.TB
	root     string
	regConf  string
	store    *Store
	shutdown bool
}

// newEnv opens a store under t.TempDir(); it is torn down (root
// filesystems removed, storage shut down with force, mounts checked) when
// the test ends.
func newEnv(t testing.TB, mods ...func(*Config)) *testEnv {
	t.Helper()
	requireRoot(t)
	root := t.TempDir()
	e := &testEnv{t: t, root: root, regConf: filepath.Join(root, "registries.conf")}
	e.writeRegistries("")
	cfg := Config{
		StorageRoot:       filepath.Join(root, "graph"),
		RunRoot:           filepath.Join(root, "run"),
		RegistriesConf:    e.regConf,
		RegistriesConfDir: filepath.Join(root, "registries.conf.d"),
		PolicyPath:        filepath.Join(root, "policy.json"), // missing: accept anything
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	s, err := New(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.store = s
	t.Cleanup(e.teardown)
	return e
}

func (e *testEnv) teardown() {
	t := e.t
	ctx := context.Background()
	if !e.shutdown {
		ids, err := e.store.Rootfses(ctx)
		if err != nil {
			t.Errorf("Rootfses: %v", err)
		}
		for _, id := range ids {
			if err := e.store.RemoveRootfs(ctx, id); err != nil {
				t.Errorf("RemoveRootfs(%s): %v", id, err)
			}
		}
		e.shutdownStore()
	}
	if mounts := mountsUnder(t, e.root); len(mounts) > 0 {
		t.Errorf("mounts left under %s: %v", e.root, mounts)
	}
}

// shutdownStore stops background pulls and unmounts everything.
func (e *testEnv) shutdownStore() {
	e.shutdown = true
	e.store.stopPulls()
	if _, err := e.store.store.Shutdown(true); err != nil {
		e.t.Errorf("storage Shutdown(true): %v", err)
	}
}

func (e *testEnv) writeRegistries(content string) {
	e.t.Helper()
	if err := os.WriteFile(e.regConf, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// insecure writes a registries.conf that lets each host be reached over
// plain HTTP.
func (e *testEnv) insecure(hosts ...string) {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "[[registry]]\nlocation = %q\ninsecure = true\n\n", h)
	}
	e.writeRegistries(b.String())
}

// counts returns the numbers of images and layers in storage.
func (e *testEnv) counts() (images, layers int) {
	e.t.Helper()
	imgs, err := e.store.store.Images()
	if err != nil {
		e.t.Fatal(err)
	}
	ls, err := e.store.store.Layers()
	if err != nil {
		e.t.Fatal(err)
	}
	return len(imgs), len(ls)
}

func mountsUnder(t testing.TB, root string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == root || strings.HasPrefix(fields[4], root+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

func isMounted(t testing.TB, path string) bool {
	t.Helper()
	for _, m := range mountsUnder(t, path) {
		if m == path {
			return true
		}
	}
	return false
}

// testRegistry is go-containerregistry's in-process registry behind a
// handler that counts blob downloads, can demand basic auth, and can stall
// one blob.
type testRegistry struct {
	t    testing.TB
	srv  *httptest.Server
	host string // 127.0.0.1:port

	user, pass  string
	requireAuth atomic.Bool

	mu       sync.Mutex
	blobGets map[string]int // guarded by mu; digest → GETs
	stall    string         // guarded by mu; digest whose GET hangs
	stalled  chan struct{}  // guarded by mu; closed when the stalled GET arrived
	release  chan struct{}  // guarded by mu; closing it lets stalled GETs go on
	// override: digest → the bytes served for it instead of the blob.
	override map[string][]byte // guarded by mu
	// blobDelay holds every blob GET this long; inFlight and maxInFlight
	// count the GETs being served.
	blobDelay             time.Duration // guarded by mu
	inFlight, maxInFlight int           // guarded by mu
}

var blobPath = regexp.MustCompile(`^/v2/.+/blobs/(sha256:[0-9a-f]{64})$`)

func newRegistry(t testing.TB) *testRegistry {
	t.Helper()
	r := &testRegistry{t: t, blobGets: map[string]int{}, user: "podbay", pass: "s3cret"}
	inner := registry.New(registry.Logger(log0()))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.requireAuth.Load() {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if m := blobPath.FindStringSubmatch(req.URL.Path); m != nil && req.Method == http.MethodGet {
			r.mu.Lock()
			r.blobGets[m[1]]++
			data, overridden := r.override[m[1]]
			delay := r.blobDelay
			r.inFlight++
			r.maxInFlight = max(r.maxInFlight, r.inFlight)
			r.mu.Unlock()
			defer func() {
				r.mu.Lock()
				r.inFlight--
				r.mu.Unlock()
			}()
			if delay > 0 {
				time.Sleep(delay)
			}
			if overridden {
				w.Header().Set("Content-Length", fmt.Sprint(len(data)))
				w.Header().Set("Docker-Content-Digest", m[1])
				_, _ = w.Write(data)
				return
			}
			r.mu.Lock()
			var wait chan struct{}
			if m[1] == r.stall {
				close(r.stalled)
				r.stall = ""
				wait = r.release
			}
			r.mu.Unlock()
			if wait != nil {
				select {
				case <-wait:
				case <-req.Context().Done():
					return
				}
			}
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// stallBlob makes the next GET of digest hang until release is called or
// the client goes away; the returned channel is closed when it arrives.
func (r *testRegistry) stallBlob(digest string) (arrived <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stall = digest
	r.stalled = make(chan struct{})
	r.release = make(chan struct{})
	rel := r.release
	var once sync.Once
	return r.stalled, func() { once.Do(func() { close(rel) }) }
}

// serveInstead makes every GET of the blob digest answer data.
func (r *testRegistry) serveInstead(digest string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.override == nil {
		r.override = map[string][]byte{}
	}
	r.override[digest] = data
}

func (r *testRegistry) gets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.blobGets {
		out[k] = v
	}
	return out
}

func (r *testRegistry) resetCounts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobGets = map[string]int{}
}

// ref returns host/repo for repo like "test/small:v1".
func (r *testRegistry) ref(repo string) string { return r.host + "/" + repo }

// push stores img under repo ("test/small:v1") through the registry's
// HTTP API and returns its manifest digest. (go-containerregistry's remote
// package would pull docker/cli into the module graph.)
func (r *testRegistry) push(repo string, img v1.Image) string {
	r.t.Helper()
	name, tag, ok := strings.Cut(repo, ":")
	if !ok {
		r.t.Fatalf("push %s: no tag", repo)
	}
	d := r.pushImage(name, img)
	raw, err := img.RawManifest()
	if err != nil {
		r.t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		r.t.Fatal(err)
	}
	r.putManifest(name, tag, string(mt), raw)
	r.resetCounts()
	return d
}

// pushImage uploads img's blobs and manifest (by digest) to repository
// name and returns the manifest digest.
func (r *testRegistry) pushImage(name string, img v1.Image) string {
	r.t.Helper()
	layers, err := img.Layers()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			r.t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			r.t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			r.t.Fatal(err)
		}
		r.putBlob(name, d.String(), data)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		r.t.Fatal(err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		r.t.Fatal(err)
	}
	r.putBlob(name, cfgName.String(), cfg)
	raw, err := img.RawManifest()
	if err != nil {
		r.t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		r.t.Fatal(err)
	}
	r.putManifest(name, d.String(), string(mt), raw)
	return d.String()
}

// pushIndex stores idx and its images under repo ("test/multi:1") and
// returns the index digest.
func (r *testRegistry) pushIndex(repo string, idx v1.ImageIndex) string {
	r.t.Helper()
	name, tag, _ := strings.Cut(repo, ":")
	im, err := idx.IndexManifest()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			r.t.Fatal(err)
		}
		r.pushImage(name, img)
	}
	raw, err := idx.RawManifest()
	if err != nil {
		r.t.Fatal(err)
	}
	mt, err := idx.MediaType()
	if err != nil {
		r.t.Fatal(err)
	}
	r.putManifest(name, tag, string(mt), raw)
	d, err := idx.Digest()
	if err != nil {
		r.t.Fatal(err)
	}
	r.resetCounts()
	return d.String()
}

func (r *testRegistry) do(method, url, contentType string, body []byte, want int) *http.Response {
	r.t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.SetBasicAuth(r.user, r.pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(resp.Body)
		r.t.Fatalf("%s %s: %s: %s", method, url, resp.Status, msg)
	}
	return resp
}

func (r *testRegistry) putBlob(name, digest string, data []byte) {
	r.t.Helper()
	resp := r.do(http.MethodPost, r.srv.URL+"/v2/"+name+"/blobs/uploads/", "", nil, http.StatusAccepted)
	loc, err := resp.Location()
	if err != nil {
		r.t.Fatal(err)
	}
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	r.do(http.MethodPut, loc.String(), "application/octet-stream", data, http.StatusCreated)
}

func (r *testRegistry) putManifest(name, ref, mediaType string, raw []byte) {
	r.t.Helper()
	r.do(http.MethodPut, r.srv.URL+"/v2/"+name+"/manifests/"+ref, mediaType, raw, http.StatusCreated)
}

// tarLayer makes a layer holding files (path → content).
func tarLayer(t testing.TB, files map[string]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for p, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return layer
}

// testImage makes a small image with one layer per entry of layers and the
// given config; oci selects OCI media types over Docker schema 2.
func testImage(t testing.TB, cfg v1.Config, oci bool, layers ...map[string]string) v1.Image {
	t.Helper()
	img := empty.Image
	if oci {
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	}
	for _, files := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, tarLayer(t, files)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// simpleImage is a one-layer image whose content (and so ID) depends on
// tag.
func simpleImage(t testing.TB, tag string) v1.Image {
	t.Helper()
	return testImage(t, v1.Config{Cmd: []string{"/bin/true"}}, false, map[string]string{"etc/tag": tag})
}

func configDigestHex(t testing.TB, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.Hex
}

func layerDigests(t testing.TB, img v1.Image) []string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

// log0 silences the registry's request log.
func log0() *stdlog.Logger { return stdlog.New(io.Discard, "", 0) }
