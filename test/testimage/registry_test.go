package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcrtypes "github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"
)

// sharedBuilder spares each test building the busybox layer again, which
// takes a second under the race detector.
var sharedBuilder = sync.OnceValue(func() *Builder { return NewBuilder("") })

// The pull side of these tests is containers/image, the client podbay's
// image service uses, so they check the registry against the real client.

// sysContext isolates containers/image from the host's registries.conf and
// credentials, and lets it use plain HTTP.
func sysContext(t *testing.T, auth *types.DockerAuthConfig) *types.SystemContext {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return &types.SystemContext{
		SystemRegistriesConfPath:    conf,
		SystemRegistriesConfDirPath: filepath.Join(dir, "registries.conf.d"),
		AuthFilePath:                filepath.Join(dir, "auth.json"),
		DockerInsecureSkipTLSVerify: types.OptionalBoolTrue,
		DockerAuthConfig:            auth,
	}
}

// openSource opens ref ("127.0.0.1:1234/test/busybox:latest").
func openSource(t *testing.T, sys *types.SystemContext, ref string) (types.ImageSource, error) {
	t.Helper()
	r, err := docker.ParseReference("//" + ref)
	if err != nil {
		t.Fatal(err)
	}
	src, err := r.NewImageSource(context.Background(), sys)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { src.Close() })
	return src, nil
}

// fetchBlob reads a blob through src and checks its digest.
func fetchBlob(t *testing.T, src types.ImageSource, info types.BlobInfo) []byte {
	t.Helper()
	rc, _, err := src.GetBlob(context.Background(), info, none.NoCache)
	if err != nil {
		t.Fatalf("get blob %s: %v", info.Digest, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read blob %s: %v", info.Digest, err)
	}
	if got := digest.FromBytes(data); got != info.Digest {
		t.Fatalf("blob %s has digest %s", info.Digest, got)
	}
	return data
}

func pushDefaults(t *testing.T, r *Registry) ([]Spec, map[string]v1.Hash) {
	t.Helper()
	specs := DefaultImages(DefaultOptions{Prefix: "test"})
	digests := map[string]v1.Hash{}
	for _, spec := range specs {
		d, err := r.Push(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		digests[spec.Repository] = d
	}
	return specs, digests
}

func TestPushPull(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	specs, digests := pushDefaults(t, r)
	sys := sysContext(t, nil)
	ctx := context.Background()

	for _, spec := range specs {
		want := digests[spec.Repository]
		built := mustDigest(t, mustBuild(t, r.Builder(), spec))
		if built != want {
			t.Errorf("%s: pushed %s, built %s", spec.Repository, want, built)
		}
		for _, ref := range append(spec.References(r.Addr()), r.Reference(spec.Repository+"@"+want.String())) {
			src, err := openSource(t, sys, ref)
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			raw, mt, err := src.GetManifest(ctx, nil)
			if err != nil {
				t.Fatalf("%s: get manifest: %v", ref, err)
			}
			if got := digest.FromBytes(raw).String(); got != want.String() {
				t.Errorf("%s: manifest digest %s, pushed %s", ref, got, want)
			}
			wantMT := spec.Format.mediaTypes().manifest
			if len(spec.Platforms) > 1 {
				wantMT = spec.Format.mediaTypes().index
			}
			if mt != string(wantMT) {
				t.Errorf("%s: media type %s, want %s", ref, mt, wantMT)
			}

			// The image for this host: an index resolves to its platform.
			img, err := image.FromUnparsedImage(ctx, sys, image.UnparsedInstance(src, nil))
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			cfg, err := img.OCIConfig(ctx)
			if err != nil {
				t.Fatalf("%s: config: %v", ref, err)
			}
			if cfg.Architecture != runtime.GOARCH || cfg.Config.User != spec.Config.User ||
				!reflect.DeepEqual(cfg.Config.Entrypoint, spec.Config.Entrypoint) {
				t.Errorf("%s: config %+v", ref, cfg)
			}
			for _, l := range img.LayerInfos() {
				fetchBlob(t, src, l)
			}
		}
	}
}

func TestPushTagsShareDigest(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	_, digests := pushDefaults(t, r)
	sys := sysContext(t, nil)
	var got []string
	for _, tag := range []string{"latest", "1.36"} {
		src, err := openSource(t, sys, r.Reference("test/busybox:"+tag))
		if err != nil {
			t.Fatal(err)
		}
		raw, _, err := src.GetManifest(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, digest.FromBytes(raw).String())
	}
	if got[0] != got[1] || got[0] != digests["test/busybox"].String() {
		t.Errorf("busybox:latest %s, busybox:1.36 %s, pushed %s", got[0], got[1], digests["test/busybox"])
	}

	resp, body := get(t, r, http.MethodGet, "/v2/test/busybox/tags/list", nil)
	var tags struct{ Tags []string }
	if err := json.Unmarshal(body, &tags); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tags list: %s %s", resp.Status, body)
	}
	if !reflect.DeepEqual(tags.Tags, []string{"1.36", "latest"}) {
		t.Errorf("tags %v", tags.Tags)
	}
}

func TestPushByDigestOnly(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	d, err := r.Push(context.Background(), Spec{Repository: "test/untagged", Config: Config{Cmd: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, r, http.MethodGet, "/v2/test/untagged/manifests/"+d.String(), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("by digest: %s", resp.Status)
	}
	resp, body := get(t, r, http.MethodGet, "/v2/test/untagged/tags/list", nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "latest") {
		t.Errorf("tags list: %s %s", resp.Status, body)
	}
}

func TestPullMultiArchStandIn(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	pushDefaults(t, r)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	sys := sysContext(t, nil)
	sys.ArchitectureChoice = other
	src, err := openSource(t, sys, r.Reference("test/multiarch:latest"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	img, err := image.FromUnparsedImage(ctx, sys, image.UnparsedInstance(src, nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.OCIConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != other {
		t.Fatalf("chose %s, want %s", cfg.Architecture, other)
	}
	layers := img.LayerInfos()
	if len(layers) != 1 {
		t.Fatalf("%d layers", len(layers))
	}
	names := gzipTarNames(t, fetchBlob(t, src, layers[0]))
	if !names["etc/testimage-stand-in"] || names["bin/busybox"] {
		t.Errorf("stand-in layer holds %v", names)
	}
}

func gzipTarNames(t *testing.T, gz []byte) map[string]bool {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(hdr.Name, "/")] = true
	}
}

// get makes one plain HTTP request to the registry.
func get(t *testing.T, r *Registry, method, path string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+r.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, body
}

// busyboxBlob pushes the busybox image and returns the path and content of
// its layer blob.
func busyboxBlob(t *testing.T, r *Registry) (string, []byte) {
	t.Helper()
	spec := Spec{Repository: "test/busybox", Tags: []string{"latest"}}
	if _, err := r.Push(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	ls, err := mustBuild(t, r.Builder(), spec).Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := ls[0].Digest()
	rc, _ := ls[0].Compressed()
	defer rc.Close()
	data, _ := io.ReadAll(rc)
	return "/v2/test/busybox/blobs/" + d.String(), data
}

func TestRegistryHTTP(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	blobPath, blob := busyboxBlob(t, r)

	if resp, _ := get(t, r, http.MethodGet, "/v2/", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/: %s", resp.Status)
	}
	resp, body := get(t, r, http.MethodHead, "/v2/test/busybox/manifests/latest", nil)
	if resp.StatusCode != http.StatusOK || len(body) != 0 ||
		resp.Header.Get("Content-Type") != string(ggcrtypes.OCIManifestSchema1) ||
		!strings.HasPrefix(resp.Header.Get("Docker-Content-Digest"), "sha256:") {
		t.Errorf("HEAD manifest: %s %v", resp.Status, resp.Header)
	}
	if resp, _ := get(t, r, http.MethodGet, "/v2/test/busybox/manifests/nope", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown tag: %s", resp.Status)
	}
	if resp, _ := get(t, r, http.MethodHead, blobPath, nil); resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(blob)) {
		t.Errorf("HEAD blob: %s, length %d", resp.Status, resp.ContentLength)
	}

	for _, tc := range []struct {
		rng         string
		first, last int
	}{
		{"bytes=0-9", 0, 9},
		{"bytes=100-", 100, len(blob) - 1}, // closed by the wrapper
	} {
		resp, body := get(t, r, http.MethodGet, blobPath, http.Header{"Range": {tc.rng}})
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, blob[tc.first:tc.last+1]) {
			t.Errorf("Range %s: %s, %d bytes", tc.rng, resp.Status, len(body))
		}
	}
	if got := r.Stats(); got.BlobGets != 2 || got.ManifestGets != 1 {
		t.Errorf("stats %+v, want 2 blob GETs and 1 manifest GET", got)
	}
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder(), Username: "alice", Password: "s3cret"})
	if _, err := r.Push(context.Background(), Spec{Repository: "test/busybox", Tags: []string{"latest"}}); err != nil {
		t.Fatalf("push under auth: %v", err)
	}

	for _, tc := range []struct {
		name       string
		user, pass string
		noAuth     bool
		want       int
	}{
		{name: "none", noAuth: true, want: http.StatusUnauthorized},
		{name: "wrong user", user: "bob", pass: "s3cret", want: http.StatusUnauthorized},
		{name: "wrong password", user: "alice", pass: "guess", want: http.StatusUnauthorized},
		{name: "empty password", user: "alice", want: http.StatusUnauthorized},
		{name: "right", user: "alice", pass: "s3cret", want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v2/", "/v2/test/busybox/manifests/latest"} {
				req, _ := http.NewRequest(http.MethodGet, "http://"+r.Addr()+path, nil)
				if !tc.noAuth {
					req.SetBasicAuth(tc.user, tc.pass)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Errorf("GET %s: %s, want %d", path, resp.Status, tc.want)
				}
				if tc.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != `Basic realm="podbay-testimage"` {
					t.Errorf("GET %s: WWW-Authenticate %q", path, resp.Header.Get("WWW-Authenticate"))
				}
			}
		})
	}

	ref := r.Reference("test/busybox:latest")
	for name, auth := range map[string]*types.DockerAuthConfig{
		"no credentials":    nil,
		"wrong credentials": {Username: "alice", Password: "wrong"},
	} {
		err := pullManifest(t, sysContext(t, auth), ref)
		if err == nil {
			t.Errorf("containers/image, %s: pulled", name)
		} else if !strings.Contains(err.Error(), "unauthorized") {
			t.Errorf("containers/image, %s: %v, want an unauthorized error", name, err)
		}
	}
	if err := pullManifest(t, sysContext(t, &types.DockerAuthConfig{Username: "alice", Password: "s3cret"}), ref); err != nil {
		t.Errorf("containers/image, right credentials: %v", err)
	}
	if r.Stats().Unauthorized == 0 {
		t.Error("no unauthorized request counted")
	}
}

// pullManifest opens ref and reads its manifest.
func pullManifest(t *testing.T, sys *types.SystemContext, ref string) error {
	t.Helper()
	src, err := openSource(t, sys, ref)
	if err != nil {
		return err
	}
	_, _, err = src.GetManifest(context.Background(), nil)
	return err
}

func TestFailBlobs(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	blobPath, blob := busyboxBlob(t, r)

	r.SetFault(FailBlobs)
	if r.Fault() != FailBlobs {
		t.Fatalf("fault %v", r.Fault())
	}
	resp, body := get(t, r, http.MethodGet, blobPath, nil)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"errors"`) {
		t.Errorf("faulted blob GET: %s %s", resp.Status, body)
	}
	if resp, _ := get(t, r, http.MethodGet, "/v2/test/busybox/manifests/latest", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("manifest GET under FailBlobs: %s", resp.Status)
	}
	if resp, _ := get(t, r, http.MethodHead, blobPath, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("blob HEAD under FailBlobs: %s", resp.Status)
	}
	src, err := openSource(t, sysContext(t, nil), r.Reference("test/busybox:latest"))
	if err != nil {
		t.Fatal(err)
	}
	d := digest.Digest(strings.TrimPrefix(blobPath, "/v2/test/busybox/blobs/"))
	if rc, _, err := src.GetBlob(context.Background(), types.BlobInfo{Digest: d, Size: -1}, none.NoCache); err == nil {
		rc.Close()
		t.Error("containers/image got a blob under FailBlobs")
	}

	r.SetFault(NoFault)
	if resp, body := get(t, r, http.MethodGet, blobPath, nil); resp.StatusCode != http.StatusOK || !bytes.Equal(body, blob) {
		t.Errorf("blob GET after the fault: %s, %d bytes", resp.Status, len(body))
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// result is the outcome of a blob GET run in the background.
type result struct {
	status int
	body   []byte
	err    error
}

func getAsync(ctx context.Context, r *Registry, path string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Addr()+path, nil)
		if err != nil {
			ch <- result{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		ch <- result{status: resp.StatusCode, body: body, err: err}
	}()
	return ch
}

func TestStallBlobs(t *testing.T) {
	t.Parallel()
	needBusybox(t)

	t.Run("client cancels", func(t *testing.T) {
		r := StartTest(t, Options{Builder: sharedBuilder()})
		blobPath, _ := busyboxBlob(t, r)
		r.SetFault(StallBlobs)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := getAsync(ctx, r, blobPath)
		waitFor(t, "a stalled GET", func() bool { return r.Stats().Stalled == 1 })
		if resp, _ := get(t, r, http.MethodGet, "/v2/test/busybox/manifests/latest", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("manifest GET under StallBlobs: %s", resp.Status)
		}
		cancel()
		if res := <-ch; !errors.Is(res.err, context.Canceled) {
			t.Errorf("cancelled GET: %+v", res)
		}
		waitFor(t, "the stall to end", func() bool { return r.Stats().Stalled == 0 })
	})

	t.Run("fault switched off", func(t *testing.T) {
		r := StartTest(t, Options{Builder: sharedBuilder()})
		blobPath, blob := busyboxBlob(t, r)
		r.SetFault(StallBlobs)
		ch := getAsync(context.Background(), r, blobPath)
		waitFor(t, "a stalled GET", func() bool { return r.Stats().Stalled == 1 })
		select {
		case res := <-ch:
			t.Fatalf("stalled GET returned: %+v", res)
		case <-time.After(50 * time.Millisecond):
		}
		r.SetFault(NoFault)
		res := <-ch
		if res.err != nil || res.status != http.StatusOK || !bytes.Equal(res.body, blob) {
			t.Errorf("released GET: status %d, %d bytes, %v", res.status, len(res.body), res.err)
		}
	})

	t.Run("switched to FailBlobs", func(t *testing.T) {
		r := StartTest(t, Options{Builder: sharedBuilder()})
		blobPath, _ := busyboxBlob(t, r)
		r.SetFault(StallBlobs)
		ch := getAsync(context.Background(), r, blobPath)
		waitFor(t, "a stalled GET", func() bool { return r.Stats().Stalled == 1 })
		r.SetFault(FailBlobs)
		if res := <-ch; res.err != nil || res.status != http.StatusInternalServerError {
			t.Errorf("released GET: status %d, %v", res.status, res.err)
		}
	})

	t.Run("registry closed", func(t *testing.T) {
		r, err := Start(context.Background(), Options{Builder: sharedBuilder()})
		if err != nil {
			t.Fatal(err)
		}
		blobPath, _ := busyboxBlob(t, r)
		r.SetFault(StallBlobs)
		ch := getAsync(context.Background(), r, blobPath)
		waitFor(t, "a stalled GET", func() bool { return r.Stats().Stalled == 1 })
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if d := time.Since(start); d > shutdownTimeout/2 {
			t.Errorf("close took %v with a stalled GET", d)
		}
		if res := <-ch; res.err == nil {
			t.Errorf("GET stalled at close: status %d, want a dropped connection", res.status)
		}
		if err := r.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
		if _, err := r.Push(context.Background(), Spec{Repository: "test/x"}); err == nil {
			t.Error("push after close succeeded")
		}
	})
}

// TestStallMidBlob: the client gets the headers and the first half of the
// blob, then nothing until the fault is switched off, then the rest; a
// client that gives up mid-blob ends the stall.
func TestStallMidBlob(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	for _, cancelIt := range []bool{false, true} {
		r := StartTest(t, Options{Builder: sharedBuilder()})
		blobPath, blob := busyboxBlob(t, r)
		r.SetFault(StallMidBlob)
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Addr()+blobPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(blob)) {
			t.Errorf("stalled GET: %s, length %d, want 200 and %d", resp.Status, resp.ContentLength, len(blob))
		}
		half := make([]byte, len(blob)/2)
		if _, err := io.ReadFull(resp.Body, half); err != nil || !bytes.Equal(half, blob[:len(half)]) {
			t.Fatalf("first half: %v", err)
		}
		waitFor(t, "a GET stalled mid-blob", func() bool { return r.Stats().Stalled == 1 })
		if cancelIt {
			cancel()
			waitFor(t, "the stall to end", func() bool { return r.Stats().Stalled == 0 })
		} else {
			r.SetFault(NoFault)
			rest, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(rest, blob[len(half):]) {
				t.Errorf("rest after release: %d bytes, %v; want %d", len(rest), err, len(blob)-len(half))
			}
		}
		resp.Body.Close()
		cancel()
	}
}

func TestFaultString(t *testing.T) {
	for f, want := range map[Fault]string{NoFault: "none", FailBlobs: "fail-blobs", StallBlobs: "stall-blobs", StallMidBlob: "stall-mid-blob", Fault(7): "Fault(7)"} {
		if got := f.String(); got != want {
			t.Errorf("%d: %q, want %q", int(f), got, want)
		}
	}
}
