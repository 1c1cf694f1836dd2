package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"go.podman.io/storage"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// defaultPauseImage is podbayd's default pause_image.
const defaultPauseImage = "registry.k8s.io/pause:3.10"

// imageBuilder builds the test images for every registry of the run, so
// that busybox's base layer is compressed once.
var imageBuilder = sync.OnceValue(func() *testimage.Builder { return testimage.NewBuilder("") })

// startRegistry starts a registry on loopback for the test; opts.Builder is
// the shared one. It holds no images until pushed.
func startRegistry(t *testing.T, opts testimage.Options) *testimage.Registry {
	t.Helper()
	opts.Builder = imageBuilder()
	return testimage.StartTest(t, opts)
}

// defaultSpec is DefaultImages' spec for repository prefix/name.
func defaultSpec(t *testing.T, prefix, name string) testimage.Spec {
	t.Helper()
	want := filepath.Join(prefix, name)
	for _, s := range testimage.DefaultImages(testimage.DefaultOptions{Prefix: prefix}) {
		if s.Repository == want {
			return s
		}
	}
	t.Fatalf("DefaultImages has no %s", want)
	return testimage.Spec{}
}

// push pushes spec and returns the digest of its manifest or index.
func push(t *testing.T, r *testimage.Registry, spec testimage.Spec) v1.Hash {
	t.Helper()
	d, err := r.Push(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// hostImage is the image spec builds for this host's platform (picked from
// the index for a multi-platform spec).
func hostImage(t *testing.T, spec testimage.Spec) v1.Image {
	t.Helper()
	a, err := imageBuilder().Build(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if a.Image != nil {
		return a.Image
	}
	im, err := a.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range im.Manifests {
		if p := desc.Platform; p != nil && p.OS == "linux" && p.Architecture == runtime.GOARCH {
			img, err := a.Index.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("index of %s has no linux/%s image", spec.Repository, runtime.GOARCH)
	return nil
}

// criID is the image ID podbayd must report for img: its config digest,
// "sha256:<hex>".
func criID(t *testing.T, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// blobCount is the number of blobs a client fetches to pull img: its
// layers and its config.
func blobCount(t *testing.T, img v1.Image) int64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(m.Layers) + 1)
}

// insecureRegistry is a registries.conf drop-in that lets podbayd pull
// from the registry at addr over plain HTTP.
func insecureRegistry(addr string) string {
	return fmt.Sprintf("[[registry]]\nlocation = %q\ninsecure = true\n", addr)
}

// k8sMirror is how an air-gapped operator points registry.k8s.io at a
// mirror under addr/k8s.
func k8sMirror(addr string) string {
	return fmt.Sprintf(`[[registry]]
prefix = "registry.k8s.io"
location = "registry.k8s.io"

[[registry.mirror]]
location = "%s/k8s"
insecure = true
`, addr)
}

func (e *env) tryPull(ctx context.Context, ref string, auth *runtimeapi.AuthConfig) (string, error) {
	resp, err := e.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth})
	if err != nil {
		return "", err
	}
	return resp.ImageRef, nil
}

// pullImage pulls ref and returns the image ID, failing the test if the
// pull fails or the ID is not of the form sha256:<hex>.
func (e *env) pullImage(t *testing.T, ref string, auth *runtimeapi.AuthConfig) string {
	t.Helper()
	id, err := e.tryPull(rpcCtx(t), ref, auth)
	if err != nil {
		t.Fatalf("PullImage %s: %v", ref, err)
	}
	if hex, ok := strings.CutPrefix(id, "sha256:"); !ok || !hexID.MatchString(hex) || len(hex) != 64 {
		t.Fatalf("PullImage %s: image ref %q, want sha256:<64 hex>", ref, id)
	}
	return id
}

// imageStatus returns the image ref names, or nil when there is none.
func (e *env) imageStatus(t *testing.T, ref string) *runtimeapi.Image {
	t.Helper()
	resp, err := e.img.ImageStatus(rpcCtx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("ImageStatus %s: %v", ref, err)
	}
	return resp.Image
}

// requireImage is imageStatus for an image that must be present with ID id.
func (e *env) requireImage(t *testing.T, ref, id string) *runtimeapi.Image {
	t.Helper()
	img := e.imageStatus(t, ref)
	if img == nil {
		t.Fatalf("ImageStatus %s: no image", ref)
	}
	if img.Id != id {
		t.Fatalf("ImageStatus %s: ID %s, want %s", ref, img.Id, id)
	}
	return img
}

func (e *env) requireNoImage(t *testing.T, ref string) {
	t.Helper()
	if img := e.imageStatus(t, ref); img != nil {
		t.Errorf("ImageStatus %s: %s (tags %v), want no image", ref, img.Id, img.RepoTags)
	}
}

func (e *env) listImages(t *testing.T, filter string) []*runtimeapi.Image {
	t.Helper()
	req := &runtimeapi.ListImagesRequest{}
	if filter != "" {
		req.Filter = &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: filter}}
	}
	resp, err := e.img.ListImages(rpcCtx(t), req)
	if err != nil {
		t.Fatalf("ListImages %q: %v", filter, err)
	}
	return resp.Images
}

func (e *env) removeImage(t *testing.T, ref string) {
	t.Helper()
	if _, err := e.img.RemoveImage(rpcCtx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
		t.Fatalf("RemoveImage %s: %v", ref, err)
	}
}

func (e *env) tryRemoveImage(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := e.img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	return err
}

// waitPauseImage waits until the daemon has the default pause image, which
// it prepares in the background at start, so that storage is quiet before
// a test compares it.
func (e *env) waitPauseImage(t *testing.T) *runtimeapi.Image {
	t.Helper()
	var img *runtimeapi.Image
	if err := eventually(30*time.Second, func() error {
		if img = e.imageStatus(t, defaultPauseImage); img == nil {
			return errorf("no %s yet", defaultPauseImage)
		}
		// Listed once committed; the import removes its temporary
		// directory right after, and tests compare the store from here.
		if tmp := dirNames(t, filepath.Join(e.storageRoot, "tmp")); slices.ContainsFunc(tmp, func(n string) bool {
			return strings.HasPrefix(n, "import-")
		}) {
			return errorf("the pause image's import is still finishing: %v", tmp)
		}
		return nil
	}); err != nil {
		t.Fatalf("pause image after start: %v", err)
	}
	return img
}

func describeImages(imgs []*runtimeapi.Image) []string {
	var ids []string
	for _, img := range imgs {
		ids = append(ids, fmt.Sprintf("%s%v", short(strings.TrimPrefix(img.Id, "sha256:")), img.RepoTags))
	}
	return ids
}

// withTag returns the images that carry tag.
func withTag(imgs []*runtimeapi.Image, tag string) []*runtimeapi.Image {
	var out []*runtimeapi.Image
	for _, img := range imgs {
		if slices.Contains(img.RepoTags, tag) {
			out = append(out, img)
		}
	}
	return out
}

// storageState is what a pull writes to the env's image store.
type storageState struct {
	Images    []string // IDs ListImages reports
	Layers    []string // layers in <storage_root>/overlay-layers/{,volatile-}layers.json
	LayerDirs []string // entries of <storage_root>/overlay
	Downloads []string // entries of <storage_root>/tmp (downloads in flight)
}

func (e *env) storageState(t *testing.T) storageState {
	t.Helper()
	var st storageState
	for _, img := range e.listImages(t, "") {
		st.Images = append(st.Images, img.Id)
	}
	// Root filesystems' layers are in the volatile list.
	for _, name := range []string{"layers.json", "volatile-layers.json"} {
		data, err := os.ReadFile(filepath.Join(e.storageRoot, "overlay-layers", name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if len(data) == 0 {
			continue
		}
		var layers []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(data, &layers); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, l := range layers {
			st.Layers = append(st.Layers, l.ID)
		}
	}
	st.LayerDirs = dirNames(t, filepath.Join(e.storageRoot, "overlay"))
	st.Downloads = dirNames(t, filepath.Join(e.storageRoot, "tmp"))
	sort.Strings(st.Images)
	sort.Strings(st.Layers)
	return st
}

func dirNames(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, ent := range entries {
		names = append(names, ent.Name())
	}
	return names
}

// requireStorageBack polls until the image store is as it was before a
// failed pull: no image, layer, layer directory or download left over.
func (e *env) requireStorageBack(t *testing.T, before storageState, after string) {
	t.Helper()
	var now storageState
	if err := eventually(10*time.Second, func() error {
		if now = e.storageState(t); !reflect.DeepEqual(now, before) {
			return errors.New("differs")
		}
		return nil
	}); err != nil {
		t.Errorf("image store after %s is not as before:\nbefore %+v\nnow    %+v", after, before, now)
	}
}

// rootfsOf returns the containers/storage container of sandbox id and the
// mount point of its writable layer.
func (e *env) rootfsOf(t *testing.T, id string) (storageContainer, string) {
	t.Helper()
	cs, err := e.storageContainers()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.ID == id {
			return c, filepath.Join(e.storageRoot, "overlay", c.Layer, "merged")
		}
	}
	t.Fatalf("no containers/storage container for sandbox %s; have %+v", short(id), cs)
	return storageContainer{}, ""
}

// runtimeSpec is the part of the pause container's OCI spec the tests read.
type runtimeSpec struct {
	Root struct {
		Path string `json:"path"`
	} `json:"root"`
	Process struct {
		Args []string `json:"args"`
	} `json:"process"`
}

func (e *env) sandboxRuntimeSpec(t *testing.T, id string) runtimeSpec {
	t.Helper()
	_, info := e.status(t, id)
	var spec runtimeSpec
	if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
		t.Fatalf("runtime spec of %s: %v\n%s", short(id), err, info.RuntimeSpec)
	}
	return spec
}

// TestPullImageDirect pulls from a registry by its address, as
// registries.conf's insecure entry allows, and looks the image up by every
// name it has.
func TestPullImageDirect(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	spec := defaultSpec(t, "test", "busybox")
	digest := push(t, r, spec)
	wantID := criID(t, hostImage(t, spec))
	e.start("")

	latest, older := r.Reference("test/busybox:latest"), r.Reference("test/busybox:1.36")
	if id := e.pullImage(t, latest, nil); id != wantID {
		t.Errorf("PullImage %s: %s, want the config digest %s", latest, id, wantID)
	}
	if id := e.pullImage(t, older, nil); id != wantID {
		t.Errorf("PullImage %s: %s, want the same image %s", older, id, wantID)
	}

	found := withTag(e.listImages(t, ""), latest)
	if len(found) != 1 {
		t.Fatalf("ListImages: %d images tagged %s, want 1: %v", len(found), latest, describeImages(e.listImages(t, "")))
	}
	img := found[0]
	if img.Id != wantID {
		t.Errorf("listed ID %s, want %s", img.Id, wantID)
	}
	if tags := slices.Sorted(slices.Values(img.RepoTags)); !reflect.DeepEqual(tags, []string{older, latest}) {
		t.Errorf("RepoTags %v, want [%s %s]", img.RepoTags, older, latest)
	}
	byDigest := r.Reference("test/busybox@" + digest.String())
	if !slices.Contains(img.RepoDigests, byDigest) {
		t.Errorf("RepoDigests %v lack %s", img.RepoDigests, byDigest)
	}
	if img.Size == 0 {
		t.Error("listed size 0")
	}
	if got := e.listImages(t, r.Reference("test/busybox")); len(got) != 1 || got[0].Id != wantID {
		t.Errorf("ListImages filtered by repository: %v, want the one image", describeImages(got))
	}

	for _, ref := range []string{latest, older, wantID, byDigest} {
		e.requireImage(t, ref, wantID)
	}
	resp, err := e.img.ImageStatus(rpcCtx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: latest}, Verbose: true})
	if err != nil {
		t.Fatalf("ImageStatus verbose: %v", err)
	}
	if info := resp.Info["info"]; !json.Valid([]byte(info)) || !strings.Contains(info, strings.TrimPrefix(wantID, "sha256:")) {
		t.Errorf("verbose info %q: want JSON naming the image", info)
	}

	// Absent, per CRI: no image and no error.
	for _, ref := range []string{r.Reference("test/busybox:absent"), r.Reference("test/absent:latest"), "sha256:" + randHex(32)} {
		e.requireNoImage(t, ref)
	}
}

// TestPullThroughMirror configures registry.k8s.io with a mirror on
// loopback, as an air-gapped node does: images and the pause image come
// from the mirror and are known by their registry.k8s.io names.
func TestPullThroughMirror(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: k8sMirror(r.Addr())})
	pauseSpec := defaultSpec(t, "k8s", "pause")
	pauseDigest := push(t, r, pauseSpec)
	e2e := testimage.Spec{
		Repository: "k8s/e2e-test-images/busybox",
		Tags:       []string{"1.29-2"},
		Config:     testimage.Config{Env: []string{testimage.DefaultPath}, Cmd: []string{"sh"}},
	}
	push(t, r, e2e)
	e.start("")

	// The first pod (with a pause process) runs from the mirror's pause image.
	id := e.runPod(t, e.podConfig("mirrored", withPause()), "")
	pause := e.imageStatus(t, defaultPauseImage)
	if pause == nil {
		t.Fatalf("no %s after the first pod ran", defaultPauseImage)
	}
	if want := "registry.k8s.io/pause@" + pauseDigest.String(); !slices.Contains(pause.RepoDigests, want) {
		t.Errorf("pause image RepoDigests %v lack %s: not the mirror's image", pause.RepoDigests, want)
	}
	if want := criID(t, hostImage(t, pauseSpec)); pause.Id != want {
		t.Errorf("pause image ID %s, want the mirror's %s", pause.Id, want)
	}
	if !pause.Pinned {
		t.Error("pause image not pinned")
	}
	spec := e.sandboxRuntimeSpec(t, id)
	if len(spec.Process.Args) == 0 || spec.Process.Args[0] != "/bin/busybox" {
		t.Errorf("pause container runs %v, want the mirror image's entrypoint /bin/busybox ...", spec.Process.Args)
	}

	ref := "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	gets := r.Stats().ManifestGets
	imgID := e.pullImage(t, ref, nil)
	if want := criID(t, hostImage(t, e2e)); imgID != want {
		t.Errorf("PullImage %s: %s, want %s", ref, imgID, want)
	}
	if r.Stats().ManifestGets == gets {
		t.Errorf("the mirror served no manifest for %s", ref)
	}
	img := e.requireImage(t, ref, imgID)
	if !reflect.DeepEqual(img.RepoTags, []string{ref}) {
		t.Errorf("RepoTags %v, want [%s]", img.RepoTags, ref)
	}
	for _, d := range img.RepoDigests {
		if !strings.HasPrefix(d, "registry.k8s.io/e2e-test-images/busybox@sha256:") {
			t.Errorf("RepoDigest %s is not under the registry.k8s.io name", d)
		}
	}
	if got := withTag(e.listImages(t, ""), ref); len(got) != 1 {
		t.Errorf("ListImages: %d images tagged %s, want 1", len(got), ref)
	}

	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}

// TestPauseImageBuiltIn: with no registry, the first pod still runs, from
// the pause image podbayd makes from its built-in pause program; each pod
// has its own overlay root filesystem, which goes with the pod.
func TestPauseImageBuiltIn(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	// Pods with a pause process, whose root filesystems are made from
	// the pause image.
	a := e.runPod(t, e.podConfig("first", withPause()), "")
	b := e.runPod(t, e.podConfig("second", withPause()), "")
	pause := withTag(e.listImages(t, ""), defaultPauseImage)
	if len(pause) != 1 {
		t.Fatalf("ListImages: %d images tagged %s, want 1", len(pause), defaultPauseImage)
	}
	if !pause[0].Pinned {
		t.Errorf("%s not pinned: kubelet's image GC would remove it", defaultPauseImage)
	}

	mounts := map[string]bool{}
	for _, id := range []string{a, b} {
		c, merged := e.rootfsOf(t, id)
		if "sha256:"+c.Image != pause[0].Id {
			t.Errorf("rootfs of %s made from image %s, want the pause image %s", short(id), c.Image, pause[0].Id)
		}
		spec := e.sandboxRuntimeSpec(t, id)
		if spec.Root.Path != merged {
			t.Errorf("pause container of %s has root %s, want its overlay %s", short(id), spec.Root.Path, merged)
		}
		if !isMounted(t, merged) {
			t.Errorf("rootfs %s of %s is not mounted", merged, short(id))
		}
		if !reflect.DeepEqual(spec.Process.Args, []string{"/pause"}) {
			t.Errorf("pause container runs %v, want [/pause]", spec.Process.Args)
		}
		mounts[merged] = true
	}
	if len(mounts) != 2 {
		t.Errorf("the two pods share a root filesystem")
	}

	e.stopAndRemove(t, a, b)
	for m := range mounts {
		if isMounted(t, m) {
			t.Errorf("%s still mounted after the pods were removed", m)
		}
	}
	e.assertNoLeaks(t)
}

// TestImageTagsDigestsIndex: a multi-arch index gives this platform's
// image; removing one tag of two keeps the image; removing by ID removes
// it, and again is fine; an image can be pulled by digest.
func TestImageTagsDigestsIndex(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	multi := defaultSpec(t, "test", "multiarch")
	indexDigest := push(t, r, multi)
	busybox := defaultSpec(t, "test", "busybox")
	digest := push(t, r, busybox)
	e.start("")

	multiRef := r.Reference("test/multiarch:latest")
	want := criID(t, hostImage(t, multi))
	if id := e.pullImage(t, multiRef, nil); id != want {
		t.Errorf("PullImage of the index: %s, want linux/%s's image %s", id, runtime.GOARCH, want)
	}
	byIndex := r.Reference("test/multiarch@" + indexDigest.String())
	img := e.requireImage(t, byIndex, want)
	if !slices.Contains(img.RepoDigests, byIndex) {
		t.Errorf("RepoDigests %v lack the index's %s", img.RepoDigests, byIndex)
	}
	// This platform's image is busybox:latest's twin (same config, same
	// layer), so it goes before busybox is pulled: by the index's digest.
	e.removeImage(t, byIndex)
	e.requireNoImage(t, multiRef)
	e.requireNoImage(t, want)

	latest, older := r.Reference("test/busybox:latest"), r.Reference("test/busybox:1.36")
	id := e.pullImage(t, latest, nil)
	if e.pullImage(t, older, nil) != id {
		t.Fatal("the two tags pulled different images")
	}
	// Removing one of its tags removes the image with every tag
	// (cri-api v0.36+ RemoveImage), here also a tag of another
	// repository naming the same image.
	other := r.Reference("test/other:v1")
	otherSpec := defaultSpec(t, "test", "busybox")
	otherSpec.Repository, otherSpec.Tags = "test/other", []string{"v1"}
	push(t, r, otherSpec)
	if e.pullImage(t, other, nil) != id {
		t.Fatal("test/other:v1 pulled another image")
	}
	img = e.requireImage(t, latest, id)
	if len(img.RepoTags) != 3 {
		t.Errorf("RepoTags %v, want the 3 tags", img.RepoTags)
	}
	e.removeImage(t, older)
	for _, ref := range []string{older, latest, other} {
		e.requireNoImage(t, ref)
	}
	e.pullImage(t, latest, nil)
	e.removeImage(t, id)
	for _, ref := range []string{id, latest, r.Reference("test/busybox@" + digest.String())} {
		e.requireNoImage(t, ref)
	}
	if got := e.listImages(t, ""); len(withTag(got, latest)) != 0 || slices.ContainsFunc(got, func(i *runtimeapi.Image) bool { return i.Id == id }) {
		t.Errorf("ListImages after removal: %v", describeImages(got))
	}
	for _, ref := range []string{id, latest, older, byIndex} {
		if err := e.tryRemoveImage(ref); err != nil {
			t.Errorf("RemoveImage %s of a removed image: %v, want OK", ref, err)
		}
	}

	byDigest := r.Reference("test/busybox@" + digest.String())
	if got := e.pullImage(t, byDigest, nil); got != id {
		t.Errorf("PullImage by digest: %s, want %s", got, id)
	}
	img = e.requireImage(t, byDigest, id)
	if !slices.Contains(img.RepoDigests, byDigest) {
		t.Errorf("RepoDigests %v lack %s", img.RepoDigests, byDigest)
	}
	e.removeImage(t, byDigest)
	e.requireNoImage(t, id)
}

// TestPullImageAuth: a registry that wants basic auth refuses a pull
// without credentials or with wrong ones, and serves the one with the
// request's credentials.
func TestPullImageAuth(t *testing.T) {
	r := startRegistry(t, testimage.Options{Username: "kubelet", Password: "s3cret"})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	spec := defaultSpec(t, "test", "busybox")
	push(t, r, spec)
	e.start("")
	ref := r.Reference("test/busybox:latest")

	for _, tc := range []struct {
		name string
		auth *runtimeapi.AuthConfig
	}{
		{"no credentials", nil},
		{"wrong password", &runtimeapi.AuthConfig{Username: "kubelet", Password: "wrong"}},
	} {
		refused := r.Stats().Unauthorized
		_, err := e.tryPull(rpcCtx(t), ref, tc.auth)
		if err == nil {
			t.Errorf("PullImage with %s succeeded", tc.name)
			continue
		}
		t.Logf("PullImage with %s: %v", tc.name, err)
		if c := code(err); c == codes.Unknown || c == codes.Internal {
			t.Errorf("PullImage with %s: code %v, want a classified error", tc.name, c)
		}
		if r.Stats().Unauthorized == refused {
			t.Errorf("PullImage with %s failed without the registry refusing it", tc.name)
		}
	}
	e.requireNoImage(t, ref)

	id := e.pullImage(t, ref, &runtimeapi.AuthConfig{Username: "kubelet", Password: "s3cret"})
	if want := criID(t, hostImage(t, spec)); id != want {
		t.Errorf("PullImage with credentials: %s, want %s", id, want)
	}
	e.requireImage(t, ref, id)
}

// TestPullImageConcurrent: identical pulls share one download, so every
// blob is fetched once.
func TestPullImageConcurrent(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	spec := testimage.Spec{
		Repository: "test/concurrent",
		Tags:       []string{"v1"},
		Files:      []testimage.File{{Path: "/etc/concurrent", Content: []byte(randHex(16))}},
		Config:     testimage.Config{Env: []string{testimage.DefaultPath}, Cmd: []string{"sh"}},
	}
	push(t, r, spec)
	img := hostImage(t, spec)
	e.start("")
	e.waitPauseImage(t)
	ref := r.Reference("test/concurrent:v1")

	// Blobs are held until every pull has reached the daemon (it logs each
	// one that joins a pull in progress), so that the pulls overlap
	// whatever the scheduling.
	const n = 8
	before := r.Stats()
	joinedBefore := strings.Count(readFile(t, e.logPath), "joining pull in progress")
	r.SetFault(testimage.StallBlobs)
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			ids[i], errs[i] = e.tryPull(ctx, ref, nil)
		}()
	}
	if err := eventually(20*time.Second, func() error {
		joined := strings.Count(readFile(t, e.logPath), "joining pull in progress") - joinedBefore
		if joined < n-1 || r.Stats().Stalled == 0 {
			return fmt.Errorf("%d of %d pulls joined the first, %d blob GETs held", joined, n-1, r.Stats().Stalled)
		}
		return nil
	}); err != nil {
		t.Errorf("pulls did not overlap: %v", err)
	}
	r.SetFault(testimage.NoFault)
	wg.Wait()

	want := criID(t, img)
	for i := range n {
		if errs[i] != nil {
			t.Errorf("pull %d: %v", i, errs[i])
		} else if ids[i] != want {
			t.Errorf("pull %d: %s, want %s", i, ids[i], want)
		}
	}
	if got, blobs := r.Stats().BlobGets-before.BlobGets, blobCount(t, img); got != blobs {
		t.Errorf("%d concurrent pulls made %d blob GETs, want %d (each blob once)", n, got, blobs)
	}
	if got := withTag(e.listImages(t, ""), ref); len(got) != 1 {
		t.Errorf("ListImages: %d images tagged %s, want 1", len(got), ref)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestPullImageFaults: bad references, absent images and unreachable or
// failing registries give the CRI error classes, and a failed or abandoned
// pull leaves nothing in the image store.
func TestPullImageFaults(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	push(t, r, defaultSpec(t, "test", "busybox"))
	e.start("")
	e.waitPauseImage(t)
	before := e.storageState(t)
	t.Logf("image store before the faults: %+v", before)
	if len(before.Downloads) != 0 {
		t.Errorf("downloads in flight with no pull running: %v", before.Downloads)
	}

	down := fmt.Sprintf("127.0.0.1:%d/test/busybox:latest", freePort(t))
	for _, tc := range []struct {
		ref     string
		want    codes.Code
		mention bool // the message names the reference
	}{
		{"UPPER/Case::bad", codes.InvalidArgument, false},
		{r.Reference("test/absent:latest"), codes.NotFound, true},
		{r.Reference("test/busybox:absent"), codes.NotFound, true},
		{down, codes.Unavailable, false},
	} {
		_, err := e.tryPull(rpcCtx(t), tc.ref, nil)
		if code(err) != tc.want {
			t.Errorf("PullImage %s: %v, want %v", tc.ref, err, tc.want)
			continue
		}
		if tc.mention && !strings.Contains(err.Error(), tc.ref) {
			t.Errorf("PullImage %s: message %q does not name the reference", tc.ref, err)
		}
	}
	e.requireStorageBack(t, before, "failed pulls")

	ref := r.Reference("test/busybox:latest")
	gets := r.Stats().BlobGets
	r.SetFault(testimage.FailBlobs)
	_, err := e.tryPull(rpcCtx(t), ref, nil)
	if err == nil {
		t.Fatal("PullImage succeeded though every blob download failed")
	}
	if code(err) != codes.Unavailable {
		t.Errorf("PullImage with failing blob downloads: %v, want Unavailable (the registry answered 500)", err)
	}
	if r.Stats().BlobGets == gets {
		t.Error("the pull failed before downloading any blob; the fault was not exercised")
	}
	e.requireStorageBack(t, before, "a pull whose blob downloads failed")

	// The client gives up while the blobs hang.
	r.SetFault(testimage.StallBlobs)
	stalled := make(chan bool, 1)
	go func() {
		stalled <- eventually(2*time.Second, func() error {
			if r.Stats().Stalled == 0 {
				return errors.New("no blob GET held")
			}
			return nil
		}) == nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = e.tryPull(ctx, ref, nil)
	cancel()
	if c := code(err); c != codes.DeadlineExceeded && c != codes.Canceled {
		t.Errorf("PullImage past its deadline: %v, want DeadlineExceeded or Canceled", err)
	}
	if !<-stalled {
		t.Error("the pull never reached a blob download; the stall was not exercised")
	}
	if err := eventually(20*time.Second, func() error {
		if n := r.Stats().Stalled; n > 0 {
			return fmt.Errorf("%d blob GETs still held", n)
		}
		return nil
	}); err != nil {
		t.Errorf("the abandoned pull did not stop: %v", err)
	}
	e.requireStorageBack(t, before, "an abandoned pull")

	r.SetFault(testimage.NoFault)
	id := e.pullImage(t, ref, nil)
	e.requireImage(t, ref, id)
	// Control: the comparison above sees what a pull writes.
	if now := e.storageState(t); len(now.Images) <= len(before.Images) || len(now.Layers) <= len(before.Layers) || len(now.LayerDirs) <= len(before.LayerDirs) {
		t.Errorf("storage state control: a successful pull changed %+v into %+v", before, now)
	}
}

// TestImageInUse: the pause image cannot be removed while a sandbox's root
// filesystem is made from it; once the sandbox is gone it can, and the
// next sandbox makes it again.
func TestImageInUse(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	id := e.runPod(t, e.podConfig("user", withPause()), "")
	pause := e.waitPauseImage(t)

	// Control for the leak checker: the live pod's root filesystem is seen
	// unless the pod is kept.
	_, merged := e.rootfsOf(t, id)
	var sawStorage, sawMount bool
	for _, l := range e.findLeaks(nil) {
		sawStorage = sawStorage || l.kind == "storage" && strings.Contains(l.what, id)
		sawMount = sawMount || l.kind == "mount" && l.path == merged
	}
	if !sawStorage || !sawMount {
		t.Errorf("leak checker control: storage container seen %v, rootfs mount %s seen %v; want both", sawStorage, merged, sawMount)
	}
	e.assertNoLeaksExcept(t, id)

	for _, ref := range []string{defaultPauseImage, pause.Id} {
		if err := e.tryRemoveImage(ref); code(err) != codes.FailedPrecondition {
			t.Errorf("RemoveImage %s in use by %s: %v, want FailedPrecondition", ref, short(id), err)
		}
	}
	e.requireImage(t, defaultPauseImage, pause.Id)
	if st, _ := e.status(t, id); st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod %v after the refused removal, want READY", st.State)
	}

	e.stopAndRemove(t, id)
	e.removeImage(t, defaultPauseImage)
	e.requireNoImage(t, pause.Id)

	again := e.runPod(t, e.podConfig("after", withPause()), "")
	e.requireImage(t, defaultPauseImage, pause.Id)
	e.stopAndRemove(t, again)
	e.assertNoLeaks(t)
}

// TestImageFsInfo: the image filesystem is the storage root, and a pull
// makes it use more.
func TestImageFsInfo(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	push(t, r, defaultSpec(t, "test", "busybox"))
	e.start("")
	e.waitPauseImage(t)

	// The pause image is listed before its import has cleaned up its
	// staging files: measure once the usage has settled.
	before := e.settledImageFs(t)
	e.pullImage(t, r.Reference("test/busybox:latest"), nil)
	after := e.imageFs(t)
	if mp := after.GetFsId().GetMountpoint(); mp != e.storageRoot && mp != mountPointOf(t, e.storageRoot) {
		t.Errorf("mountpoint %q, want the storage root %s or its filesystem's mount point %s", mp, e.storageRoot, mountPointOf(t, e.storageRoot))
	}
	if after.GetUsedBytes().GetValue() == 0 || after.GetInodesUsed().GetValue() == 0 {
		t.Errorf("used bytes %d, inodes %d after a pull; want both > 0", after.GetUsedBytes().GetValue(), after.GetInodesUsed().GetValue())
	}
	if after.GetUsedBytes().GetValue() <= before.GetUsedBytes().GetValue() || after.GetInodesUsed().GetValue() <= before.GetInodesUsed().GetValue() {
		t.Errorf("pulling busybox did not raise usage: bytes %d → %d, inodes %d → %d",
			before.GetUsedBytes().GetValue(), after.GetUsedBytes().GetValue(), before.GetInodesUsed().GetValue(), after.GetInodesUsed().GetValue())
	}
	if after.Timestamp == 0 {
		t.Error("no timestamp")
	}
}

func (e *env) imageFs(t *testing.T) *runtimeapi.FilesystemUsage {
	t.Helper()
	resp, err := e.img.ImageFsInfo(rpcCtx(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatalf("ImageFsInfo: %v", err)
	}
	if len(resp.ImageFilesystems) != 1 {
		t.Fatalf("ImageFsInfo: %d filesystems, want 1", len(resp.ImageFilesystems))
	}
	return resp.ImageFilesystems[0]
}

// settledImageFs is ImageFsInfo once two readings 200 ms apart agree (at
// most 10 s), so that work still in flight in the store is not measured.
func (e *env) settledImageFs(t *testing.T) *runtimeapi.FilesystemUsage {
	t.Helper()
	prev := e.imageFs(t)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		cur := e.imageFs(t)
		if cur.GetUsedBytes().GetValue() == prev.GetUsedBytes().GetValue() && cur.GetInodesUsed().GetValue() == prev.GetInodesUsed().GetValue() {
			return cur
		}
		prev = cur
	}
	return prev
}

// mountPointOf is the mount point of the filesystem holding path.
func mountPointOf(t *testing.T, path string) string {
	best := "/"
	for _, m := range mountPoints(t) {
		if (path == m || strings.HasPrefix(path, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// TestImageRestart: a pod's root filesystem survives a daemon crash and
// goes with the pod; one whose sandbox was half made when the daemon died,
// and one no record owns, are removed by the restarted daemon.
func TestImageRestart(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	// A pod with a pause process: a pinned one has no root filesystem.
	id := e.runPod(t, e.podConfig("survivor", withPause()), "")
	_, merged := e.rootfsOf(t, id)
	_, info := e.status(t, id)

	e.kill9()
	e.restart("")
	if !isMounted(t, merged) {
		t.Errorf("rootfs %s of the running pod unmounted across the restart", merged)
	}
	if !pidAlive(info.Pid) {
		t.Errorf("pause process %d died with the daemon", info.Pid)
	}
	e.assertNoLeaksExcept(t, id)
	e.stopAndRemove(t, id)
	if isMounted(t, merged) {
		t.Errorf("rootfs %s still mounted after the pod was removed", merged)
	}
	e.assertNoLeaks(t)

	// Killed after the sandbox container was created: its root filesystem
	// exists, mounted, when the daemon dies.
	e.restart("run.create=kill")
	if _, err := e.tryRunPod(rpcCtx(t), e.podConfig("half-made", withPause()), ""); code(err) != codes.Unavailable {
		t.Errorf("RunPodSandbox with run.create=kill: %v, want Unavailable (daemon gone)", err)
	}
	e.waitExit(10 * time.Second)
	cs, err := e.storageContainers()
	if err != nil || len(cs) != 1 {
		t.Fatalf("storage containers after the crash: %+v, %v; want the half-made sandbox's", cs, err)
	}
	halfMade := filepath.Join(e.storageRoot, "overlay", cs[0].Layer, "merged")
	if !isMounted(t, halfMade) {
		t.Errorf("the half-made sandbox's rootfs %s was not mounted at the crash", halfMade)
	}
	e.restart("")
	e.eventuallyNoLeaks(t, 20*time.Second)
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("pods after the restart: %v", podIDs(pods))
	}

	// A root filesystem no record owns, as a crash between removing a
	// sandbox's record and its storage would leave.
	pause := e.waitPauseImage(t)
	e.kill9()
	orphan := randHex(32)
	orphanMount := makeOrphanRootfs(t, e, orphan, strings.TrimPrefix(pause.Id, "sha256:"))
	if cs, err := e.storageContainers(); err != nil || len(cs) != 1 || cs[0].ID != orphan || !isMounted(t, orphanMount) {
		t.Fatalf("orphan rootfs not made: storage containers %+v (%v), %s mounted %v", cs, err, orphanMount, isMounted(t, orphanMount))
	}
	e.start("")
	e.eventuallyNoLeaks(t, 20*time.Second)
	if isMounted(t, orphanMount) {
		t.Errorf("orphan rootfs %s still mounted", orphanMount)
	}

	again := e.runPod(t, e.podConfig("after"), "")
	e.stopAndRemove(t, again)
	e.assertNoLeaks(t)
}

// makeOrphanRootfs creates and mounts a containers/storage container from
// imageID in the env's store, with the daemon stopped, and returns its
// mount point.
func makeOrphanRootfs(t *testing.T, e *env, id, imageID string) string {
	t.Helper()
	st, err := storage.GetStore(storage.StoreOptions{
		GraphRoot:          e.storageRoot,
		RunRoot:            e.runRoot,
		GraphDriverName:    "overlay",
		GraphDriverOptions: []string{"overlay.mountopt=nodev"},
	})
	if err != nil {
		t.Fatalf("open the env's storage: %v", err)
	}
	// Mounted layers stay mounted: Shutdown then reports them, as expected.
	defer st.Shutdown(false) //nolint:errcheck
	if _, err := st.CreateContainer(id, []string{id}, imageID, "", "", nil); err != nil {
		t.Fatalf("create orphan storage container: %v", err)
	}
	mp, err := st.Mount(id, "")
	if err != nil {
		t.Fatalf("mount orphan storage container: %v", err)
	}
	return mp
}
