package image

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/prometheus/client_golang/prometheus"
	imagetypes "go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestPullByTagAndDigest(t *testing.T) {
	reg := newRegistry(t)
	reg2 := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Metrics = reg2 })
	e.insecure(reg.host)
	ctx := testCtx(t)

	img := testImage(t, v1.Config{
		Entrypoint:   []string{"/bin/sh", "-c"},
		Cmd:          []string{"echo hi"},
		Env:          []string{"PATH=/bin", "A=b"},
		WorkingDir:   "/work",
		User:         "1000:1000",
		Labels:       map[string]string{"l": "v"},
		StopSignal:   "SIGQUIT",
		ExposedPorts: map[string]struct{}{"80/tcp": {}, "53/udp": {}},
		Volumes:      map[string]struct{}{"/data": {}},
	}, true, map[string]string{"bin/a": "a"}, map[string]string{"bin/b": "b"})
	img = mutate.Annotations(img, map[string]string{"org.example/k": "v"}).(v1.Image)
	manifestDigest := reg.push("test/small:v1", img)
	id := configDigestHex(t, img)

	got, err := e.store.Pull(ctx, reg.ref("test/small:v1"), nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if got.ID != id {
		t.Errorf("ID = %s, want config digest %s", got.ID, id)
	}
	if want := []string{reg.ref("test/small:v1")}; !slices.Equal(got.RepoTags, want) {
		t.Errorf("RepoTags = %v, want %v", got.RepoTags, want)
	}
	if want := []string{reg.ref("test/small@" + manifestDigest)}; !slices.Equal(got.RepoDigests, want) {
		t.Errorf("RepoDigests = %v, want %v", got.RepoDigests, want)
	}
	if got.Size == 0 {
		t.Error("Size = 0")
	}
	if got.UID == nil || *got.UID != 1000 || got.Username != "" {
		t.Errorf("UID, Username = %v, %q; want 1000, \"\"", got.UID, got.Username)
	}
	c := got.Config
	if !slices.Equal(c.Entrypoint, []string{"/bin/sh", "-c"}) || !slices.Equal(c.Cmd, []string{"echo hi"}) ||
		!slices.Equal(c.Env, []string{"PATH=/bin", "A=b"}) || c.WorkingDir != "/work" || c.User != "1000:1000" ||
		c.Labels["l"] != "v" || c.StopSignal != "SIGQUIT" ||
		!slices.Equal(c.ExposedPorts, []string{"53/udp", "80/tcp"}) || !slices.Equal(c.Volumes, []string{"/data"}) {
		t.Errorf("Config = %+v", c)
	}
	if got.Annotations["org.example/k"] != "v" {
		t.Errorf("Annotations = %v", got.Annotations)
	}

	// The same image by digest: no download, the digest name added.
	reg.resetCounts()
	byDigest, err := e.store.Pull(ctx, reg.ref("test/small@"+manifestDigest), nil)
	if err != nil {
		t.Fatalf("Pull by digest: %v", err)
	}
	if byDigest.ID != id {
		t.Errorf("by digest: ID = %s, want %s", byDigest.ID, id)
	}
	for _, l := range layerDigests(t, img) {
		if n := reg.gets()[l]; n != 0 {
			t.Errorf("layer %s downloaded %d times on the second pull", l, n)
		}
	}
	if !slices.Contains(byDigest.RepoDigests, reg.ref("test/small@"+manifestDigest)) {
		t.Errorf("RepoDigests = %v", byDigest.RepoDigests)
	}

	for _, ref := range []string{id, "sha256:" + id, id[:12], reg.ref("test/small:v1"), reg.ref("test/small@" + manifestDigest)} {
		st, err := e.store.Status(ctx, ref)
		if err != nil {
			t.Errorf("Status(%s): %v", ref, err)
			continue
		}
		if st.ID != id {
			t.Errorf("Status(%s).ID = %s", ref, st.ID)
		}
	}
	if _, err := e.store.Status(ctx, reg.ref("test/small:v2")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status of an absent tag: %v, want ErrNotFound", err)
	}

	fs, err := e.store.FsInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fs.UsedBytes == 0 || fs.InodesUsed == 0 || fs.Mountpoint != filepath.Join(e.root, "graph") {
		t.Errorf("FsInfo = %+v", fs)
	}

	families, err := reg2.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		switch f.GetName() {
		case "podbay_image_pull_bytes_total":
			seen[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue() > 0
		case "podbay_image_pull_duration_seconds":
			seen[f.GetName()] = f.GetMetric()[0].GetHistogram().GetSampleCount() == 2
		case "podbay_image_phase_duration_seconds":
			for _, m := range f.GetMetric() {
				var op, phase string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "operation":
						op = l.GetValue()
					case "phase":
						phase = l.GetValue()
					}
				}
				seen[op+"/"+phase] = m.GetSummary().GetSampleCount() > 0
			}
		}
	}
	if !seen["podbay_image_pull_bytes_total"] || !seen["podbay_image_pull_duration_seconds"] {
		t.Errorf("metrics not recorded: %v", seen)
	}
	// Each phase of the pulls, and the layer's in-process unpacking.
	for _, k := range []string{"pull/resolve", "pull/manifest", "pull/layers", "pull/commit", "pull/record", "layer/unpack"} {
		if !seen[k] {
			t.Errorf("phase %s not recorded: %v", k, seen)
		}
	}
}

func TestPullIndexPicksPlatform(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)

	amd64 := testImage(t, v1.Config{Cmd: []string{"amd64"}}, true, map[string]string{"arch": "amd64"})
	arm64 := testImage(t, v1.Config{Cmd: []string{"arm64"}}, true, map[string]string{"arch": "arm64"})
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: arm64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	indexDigest := reg.pushIndex("test/multi:1", idx)
	amdDigest, _ := amd64.Digest()

	got, err := e.store.Pull(ctx, reg.ref("test/multi:1"), nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if got.ID != configDigestHex(t, amd64) {
		t.Errorf("ID = %s, want the amd64 image %s", got.ID, configDigestHex(t, amd64))
	}
	want := []string{reg.ref("test/multi@" + indexDigest), reg.ref("test/multi@" + amdDigest.String())}
	if !slices.Equal(got.RepoDigests, want) {
		t.Errorf("RepoDigests = %v, want %v (index first)", got.RepoDigests, want)
	}
	armLayers := layerDigests(t, arm64)
	if n := reg.gets()[armLayers[0]]; n != 0 {
		t.Errorf("arm64 layer downloaded %d times", n)
	}
	for _, ref := range []string{reg.ref("test/multi@" + indexDigest), reg.ref("test/multi@" + amdDigest.String())} {
		if st, err := e.store.Status(ctx, ref); err != nil || st.ID != got.ID {
			t.Errorf("Status(%s) = %v, %v", ref, st, err)
		}
	}
	// Pulling by the index digest resolves to the same image.
	byDigest, err := e.store.Pull(ctx, reg.ref("test/multi@"+indexDigest), nil)
	if err != nil || byDigest.ID != got.ID {
		t.Errorf("Pull by index digest = %v, %v", byDigest, err)
	}
}

func TestPullThroughMirror(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	ctx := testCtx(t)
	pause := simpleImage(t, "pause")
	reg.push("k8s/pause:3.10", pause)
	busybox := simpleImage(t, "busybox")
	reg.push("hub/library/busybox:latest", busybox)
	e.writeRegistries(`
[[registry]]
prefix = "registry.k8s.io"
location = "registry.k8s.io"
[[registry.mirror]]
location = "` + reg.host + `/k8s"
insecure = true

[[registry]]
prefix = "docker.io"
location = "docker.io"
[[registry.mirror]]
location = "` + reg.host + `/hub"
insecure = true
`)
	got, err := e.store.Pull(ctx, "registry.k8s.io/pause:3.10", nil)
	if err != nil {
		t.Fatalf("Pull through mirror: %v", err)
	}
	if got.ID != configDigestHex(t, pause) || !slices.Equal(got.RepoTags, []string{"registry.k8s.io/pause:3.10"}) {
		t.Errorf("got %s %v", got.ID, got.RepoTags)
	}
	// An unqualified name is docker.io's, as kubelet users expect.
	got, err = e.store.Pull(ctx, "busybox", nil)
	if err != nil {
		t.Fatalf("Pull busybox: %v", err)
	}
	if !slices.Equal(got.RepoTags, []string{"docker.io/library/busybox:latest"}) {
		t.Errorf("RepoTags = %v", got.RepoTags)
	}
	for _, ref := range []string{"busybox", "busybox:latest", "library/busybox", "docker.io/library/busybox:latest"} {
		if st, err := e.store.Status(ctx, ref); err != nil || st.ID != got.ID {
			t.Errorf("Status(%s) = %v, %v", ref, st, err)
		}
	}
}

func TestPullShortNameSearch(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t, func(c *Config) { c.ShortNameMode = ShortNameDisabled })
	ctx := testCtx(t)
	img := simpleImage(t, "tool")
	reg.push("tools/tool:1", img)
	// The first search registry is down: the second one serves the image.
	e.writeRegistries(`
unqualified-search-registries = ["127.0.0.1:1", "` + reg.host + `"]
[[registry]]
location = "` + reg.host + `"
insecure = true
[[registry]]
location = "127.0.0.1:1"
insecure = true
`)
	got, err := e.store.Pull(ctx, "tools/tool:1", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if !slices.Equal(got.RepoTags, []string{reg.ref("tools/tool:1")}) {
		t.Errorf("RepoTags = %v", got.RepoTags)
	}
	if st, err := e.store.Status(ctx, "tools/tool:1"); err != nil || st.ID != got.ID {
		t.Errorf("Status by short name = %v, %v", st, err)
	}
}

func TestPullAuth(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	img := simpleImage(t, "private")
	reg.push("private/app:1", img)
	reg.requireAuth.Store(true)
	ref := reg.ref("private/app:1")

	for name, auth := range map[string]*Auth{
		"none":           nil,
		"wrong password": {Username: reg.user, Password: "nope"},
	} {
		_, err := e.store.Pull(ctx, ref, auth)
		if !errors.Is(err, ErrUnauthorized) || !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s: Pull = %v, want ErrUnauthorized", name, err)
		}
	}
	if images, layers := e.counts(); images != 0 || layers != 0 {
		t.Errorf("after refused pulls: %d images, %d layers", images, layers)
	}
	got, err := e.store.Pull(ctx, ref, &Auth{Username: reg.user, Password: reg.pass})
	if err != nil {
		t.Fatalf("Pull with credentials: %v", err)
	}
	if err := e.store.Remove(ctx, got.ID); err != nil {
		t.Fatal(err)
	}
	encoded := base64.StdEncoding.EncodeToString([]byte(reg.user + ":" + reg.pass))
	if _, err := e.store.Pull(ctx, ref, &Auth{Auth: encoded}); err != nil {
		t.Fatalf("Pull with base64 auth: %v", err)
	}
}

func TestPullErrors(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	ctx := testCtx(t)
	reg.push("test/exists:1", simpleImage(t, "exists"))

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := closed.Addr().String()
	closed.Close()
	e.insecure(reg.host, down)

	for _, tc := range []struct {
		ref  string
		want error
	}{
		{reg.ref("test/exists:2"), errdefs.ErrNotFound},
		{reg.ref("test/absent:1"), errdefs.ErrNotFound},
		{reg.ref("test/exists@sha256:" + strings.Repeat("ab", 32)), errdefs.ErrNotFound},
		{"", errdefs.ErrInvalidArgument},
		{"Upper/Case", errdefs.ErrInvalidArgument},
		{"busybox@sha256:123", errdefs.ErrInvalidArgument},
		{"a b", errdefs.ErrInvalidArgument},
		{down + "/test/x:1", errdefs.ErrUnavailable},
	} {
		_, err := e.store.Pull(ctx, tc.ref, nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("Pull(%q) = %v, want %v", tc.ref, err, tc.want)
			continue
		}
		if tc.want == errdefs.ErrNotFound && !strings.Contains(err.Error(), tc.ref) {
			t.Errorf("Pull(%q): message does not name the reference: %v", tc.ref, err)
		}
		t.Logf("%s: %v", tc.ref, err)
	}
	if images, layers := e.counts(); images != 0 || layers != 0 {
		t.Errorf("after failed pulls: %d images, %d layers", images, layers)
	}
}

func TestConcurrentPullsShareOneDownload(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	img := testImage(t, v1.Config{}, false, map[string]string{"a": "1"}, map[string]string{"b": "2"})
	reg.push("test/shared:1", img)
	layers := layerDigests(t, img)
	arrived, release := reg.stallBlob(layers[1])

	const n = 8
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := e.store.Pull(ctx, reg.ref("test/shared:1"), nil)
			errs[i] = err
			if err == nil {
				ids[i] = got.ID
			}
		}()
	}
	<-arrived
	waitFor(t, "all callers to join the pull", func() bool {
		e.store.mu.Lock()
		defer e.store.mu.Unlock()
		for _, c := range e.store.pulls {
			return c.waiters == n
		}
		return false
	})
	release()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != configDigestHex(t, img) {
			t.Errorf("caller %d: %s, %v", i, ids[i], errs[i])
		}
	}
	for d, count := range reg.gets() {
		if count != 1 {
			t.Errorf("blob %s fetched %d times, want 1", d, count)
		}
	}
}

// A caller that gives up does not cancel the pull others still wait for.
func TestPullOneWaiterCancels(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	img := simpleImage(t, "cancel-one")
	reg.push("test/c:1", img)
	arrived, release := reg.stallBlob(layerDigests(t, img)[0])

	quitter, quit := context.WithCancel(testCtx(t))
	quitErr := make(chan error, 1)
	go func() {
		_, err := e.store.Pull(quitter, reg.ref("test/c:1"), nil)
		quitErr <- err
	}()
	<-arrived
	stayErr := make(chan error, 1)
	go func() {
		_, err := e.store.Pull(testCtx(t), reg.ref("test/c:1"), nil)
		stayErr <- err
	}()
	waitFor(t, "second caller to join", func() bool {
		e.store.mu.Lock()
		defer e.store.mu.Unlock()
		for _, c := range e.store.pulls {
			return c.waiters == 2
		}
		return false
	})
	quit()
	if err := <-quitErr; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
	release()
	if err := <-stayErr; err != nil {
		t.Errorf("remaining caller: %v", err)
	}
}

// A cancelled pull leaves nothing: no image, no layer it had already
// committed, no download in the temporary directory.
func TestCancelledPullLeavesNothing(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)

	// A layer that is in storage before must survive.
	base := map[string]string{"base": "shared"}
	reg.push("test/base:1", testImage(t, v1.Config{}, false, base))
	if _, err := e.store.Pull(ctx, reg.ref("test/base:1"), nil); err != nil {
		t.Fatal(err)
	}
	_, layersBefore := e.counts()

	img := testImage(t, v1.Config{}, false, base, map[string]string{"second": "x"}, map[string]string{"third": "y"})
	reg.push("test/big:1", img)
	layers := layerDigests(t, img)
	arrived, release := reg.stallBlob(layers[2])
	defer release()

	pullCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Pull(pullCtx, reg.ref("test/big:1"), nil)
		done <- err
	}()
	<-arrived
	// Wait until containers/image committed the second layer, which is
	// what a cancelled pull would otherwise leave behind.
	waitFor(t, "second layer committed", func() bool {
		_, n := e.counts()
		return n == layersBefore+1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Pull = %v, want context.Canceled", err)
	}
	e.store.pullsDone.Wait()

	images, layersAfter := e.counts()
	if images != 1 || layersAfter != layersBefore {
		t.Errorf("after cancel: %d images, %d layers; want 1, %d", images, layersAfter, layersBefore)
	}
	entries, err := os.ReadDir(e.store.tmpDir)
	if err != nil || len(entries) != 0 {
		t.Errorf("download directory: %v, %v", entries, err)
	}
	// The retry works and reuses the first layer.
	release()
	reg.resetCounts()
	if _, err := e.store.Pull(ctx, reg.ref("test/big:1"), nil); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := reg.gets()[layers[0]]; n != 0 {
		t.Errorf("pre-existing layer downloaded %d times", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The depth bound trips once, when the blobs started or reused pass those
// of an image of maxImageLayers layers and its config, and not before.
func TestPullProgressTooDeep(t *testing.T) {
	for _, tc := range []struct {
		blobs int
		trips int
	}{{maxImageLayers + 1, 0}, {maxImageLayers + 2, 1}, {3 * maxImageLayers, 1}} {
		trips := 0
		p := &pullProgress{ref: "x", tooDeep: func() { trips++ }}
		events := make(chan imagetypes.ProgressProperties, tc.blobs)
		for i := range tc.blobs {
			ev := imagetypes.ProgressEventNewArtifact
			if i%2 == 1 {
				ev = imagetypes.ProgressEventSkipped
			}
			events <- imagetypes.ProgressProperties{Event: ev}
		}
		close(events)
		p.consume(context.Background(), events)
		if trips != tc.trips {
			t.Errorf("%d blobs: tripped %d times, want %d", tc.blobs, trips, tc.trips)
		}
	}
}
