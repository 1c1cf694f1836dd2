package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	digest "github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/ulikunitz/xz"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/archive"

	"github.com/podbay/podbay/internal/log"

	"github.com/podbay/podbay/internal/errdefs"
)

// rawLayer is a layer blob as the registry serves it and the diffID the
// config claims for it.
type rawLayer struct {
	blob      []byte
	mediaType string
	diffID    digest.Digest
}

func gzipLayer(t testing.TB, tarData []byte) rawLayer {
	t.Helper()
	var buf bytes.Buffer
	zw := pgzip.NewWriter(&buf)
	if _, err := zw.Write(tarData); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return rawLayer{blob: buf.Bytes(), mediaType: imgspecv1.MediaTypeImageLayerGzip, diffID: digest.FromBytes(tarData)}
}

func zstdLayer(t testing.TB, tarData []byte) rawLayer {
	t.Helper()
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	blob := zw.EncodeAll(tarData, nil)
	return rawLayer{blob: blob, mediaType: imgspecv1.MediaTypeImageLayerZstd, diffID: digest.FromBytes(tarData)}
}

func plainLayer(tarData []byte) rawLayer {
	return rawLayer{blob: tarData, mediaType: imgspecv1.MediaTypeImageLayer, diffID: digest.FromBytes(tarData)}
}

// pushRaw pushes an OCI image of layers under repo ("test/x:1") and returns
// its manifest digest and image ID (config digest hex).
func (r *testRegistry) pushRaw(repo string, layers ...rawLayer) (string, string) {
	r.t.Helper()
	name, tag, _ := strings.Cut(repo, ":")
	cfg := imgspecv1.Image{
		Platform: imgspecv1.Platform{OS: "linux", Architecture: "amd64"},
		Config:   imgspecv1.ImageConfig{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}},
		RootFS:   imgspecv1.RootFS{Type: "layers"},
	}
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	cfg.Created = &created
	m := imgspecv1.Manifest{MediaType: imgspecv1.MediaTypeImageManifest}
	m.SchemaVersion = 2
	for _, l := range layers {
		d := digest.FromBytes(l.blob)
		r.putBlob(name, d.String(), l.blob)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
		m.Layers = append(m.Layers, imgspecv1.Descriptor{MediaType: l.mediaType, Digest: d, Size: int64(len(l.blob))})
	}
	rawCfg, err := json.Marshal(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	cfgDigest := digest.FromBytes(rawCfg)
	r.putBlob(name, cfgDigest.String(), rawCfg)
	m.Config = imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageConfig, Digest: cfgDigest, Size: int64(len(rawCfg))}
	rawManifest, err := json.Marshal(m)
	if err != nil {
		r.t.Fatal(err)
	}
	r.putManifest(name, tag, imgspecv1.MediaTypeImageManifest, rawManifest)
	r.resetCounts()
	return digest.FromBytes(rawManifest).String(), cfgDigest.Encoded()
}

// testTar builds a tar of entries (tarEntry as in unpack_test.go).
func testTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func dirEntry(name string, mode int64) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}}
}

func fileEntry(name, body string, uid int) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Uid: uid, Gid: uid + 1}, body: body}
}

// stagingDirs lists the overlay driver's staging directories left.
func (e *testEnv) stagingDirs() []string {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.store.store.GraphRoot(), "overlay", "staging"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	return names
}

// layerView is what a pull records about a layer, for comparing the two
// pull paths (less what differs by design: creation time, and the
// compressed size and compression type, which staged layers do not record).
type layerView struct {
	ID, Parent                           string
	CompressedDigest, UncompressedDigest digest.Digest
	UncompressedSize                     int64
	UIDs, GIDs                           []uint32
	Tree                                 map[string]string
	DiffDigest                           digest.Digest // of the layer's diff as storage rebuilds it (tar-split)
}

func (e *testEnv) layerChain(topLayer string) []layerView {
	e.t.Helper()
	var out []layerView
	for id := topLayer; id != ""; {
		l, err := e.store.store.Layer(id)
		if err != nil {
			e.t.Fatal(err)
		}
		dir := filepath.Join(e.store.store.GraphRoot(), "overlay", l.ID, "diff")
		v := layerView{ID: l.ID, Parent: l.Parent, CompressedDigest: l.CompressedDigest, UncompressedDigest: l.UncompressedDigest,
			UncompressedSize: l.UncompressedSize, UIDs: l.UIDs, GIDs: l.GIDs, Tree: treeOf(e.t.(*testing.T), dir)}
		uncompressed := archive.Uncompressed
		rc, err := e.store.store.Diff("", l.ID, &storage.DiffOptions{Compression: &uncompressed})
		if err != nil {
			e.t.Fatal(err)
		}
		d, err := digest.FromReader(rc)
		rc.Close()
		if err != nil {
			e.t.Fatal(err)
		}
		v.DiffDigest = d
		out = append([]layerView{v}, out...)
		id = l.Parent
	}
	return out
}

// multiLayerTars is a three-layer image's tars: a root directory entry
// with its own mode, files of several owners, a whiteout.
func multiLayerTars(t testing.TB) [][]byte {
	return [][]byte{
		testTar(t, dirEntry("./", 0o750), dirEntry("etc/", 0o755), fileEntry("etc/os-release", "podbay test\n", 0),
			fileEntry("etc/owned", "x", 1000)),
		testTar(t, dirEntry("usr/", 0o755), fileEntry("usr/big", strings.Repeat("podbay ", 50000), 0),
			fileEntry("etc/.wh.owned", "", 0)),
		testTar(t, fileEntry("app", "#!/bin/sh\n", 33)),
	}
}

// The one-pass pull stores what copy.Image stored: the same image ID,
// names, digests, big data and metadata, the same layer IDs, digests,
// sizes, owners and files, and a tar-split that rebuilds each diff.
func TestOnePassMatchesCopyImage(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	manifestDigest, id := reg.pushRaw("test/multi:1", gzipLayer(t, tars[0]), zstdLayer(t, tars[1]), plainLayer(tars[2]))

	type view struct {
		Image     *Image
		Digests   []digest.Digest
		Names     []string
		BigData   []string
		Metadata  string
		Created   time.Time
		Layers    []layerView
		ImageSize int64
	}
	pull := func(copyPull bool) view {
		e := newEnv(t)
		e.store.copyPull = copyPull
		e.insecure(reg.host)
		ctx := testCtx(t)
		img, err := e.store.Pull(ctx, reg.ref("test/multi:1"), nil)
		if err != nil {
			t.Fatalf("Pull (copy.Image: %v): %v", copyPull, err)
		}
		st, err := e.store.Status(ctx, img.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(st, img) {
			t.Errorf("Status = %+v, Pull returned %+v", st, img)
		}
		rec, err := e.store.store.Image(img.ID)
		if err != nil {
			t.Fatal(err)
		}
		size, err := e.store.store.ImageSize(img.ID)
		if err != nil {
			t.Fatal(err)
		}
		bd := slices.Clone(rec.BigDataNames)
		slices.Sort(bd)
		if staged := e.stagingDirs(); len(staged) != 0 {
			t.Errorf("staging directories left: %v", staged)
		}
		return view{Image: img, Digests: rec.Digests, Names: rec.Names, BigData: bd, Metadata: rec.Metadata,
			Created: rec.Created, Layers: e.layerChain(rec.TopLayer), ImageSize: size}
	}
	old, onePass := pull(true), pull(false)
	if onePass.Image.ID != id {
		t.Errorf("ID = %s, want the config digest %s", onePass.Image.ID, id)
	}
	if !slices.Contains(onePass.Image.RepoDigests, reg.ref("test/multi@"+manifestDigest)) {
		t.Errorf("RepoDigests = %v", onePass.Image.RepoDigests)
	}
	if len(onePass.Layers) != 3 {
		t.Fatalf("%d layers", len(onePass.Layers))
	}
	for i, l := range onePass.Layers {
		if l.DiffDigest != l.UncompressedDigest {
			t.Errorf("layer %d: storage rebuilds a diff of %s, its diffID is %s", i, l.DiffDigest, l.UncompressedDigest)
		}
	}
	if !reflect.DeepEqual(old, onePass) {
		t.Errorf("copy.Image stored\n%+v\nthe one-pass pull\n%+v", old, onePass)
		for i := range min(len(old.Layers), len(onePass.Layers)) {
			if !reflect.DeepEqual(old.Layers[i], onePass.Layers[i]) {
				t.Errorf("layer %d:\n%+v\n%+v", i, old.Layers[i], onePass.Layers[i])
			}
		}
	}
}

// A layer whose bytes do not match the manifest's digest, or whose
// content does not match the config's diffID, fails the pull with
// InvalidArgument naming the mismatch, and leaves no image, layer or
// staging directory.
func TestOnePassDigestMismatch(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	good := gzipLayer(t, tars[0])
	wrongBytes := gzipLayer(t, tars[1])
	reg.pushRaw("test/wrongblob:1", good, wrongBytes)
	// The registry answers the second layer's GET with another valid layer.
	reg.serveInstead(digest.FromBytes(wrongBytes.blob).String(), gzipLayer(t, tars[2]).blob)

	wrongDiffID := zstdLayer(t, tars[1])
	wrongDiffID.diffID = digest.FromString("not this layer")
	reg.pushRaw("test/wrongdiffid:1", good, wrongDiffID)

	for _, tc := range []struct{ ref, want string }{
		{"test/wrongblob:1", "compressed digest mismatch"},
		{"test/wrongdiffid:1", "diffID (the config's uncompressed digest) mismatch"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			e := newEnv(t)
			e.insecure(reg.host)
			_, err := e.store.Pull(testCtx(t), reg.ref(tc.ref), nil)
			var mismatch *LayerDigestError
			if !errors.As(err, &mismatch) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Pull = %v, want a %q LayerDigestError (InvalidArgument)", err, tc.want)
			}
			e.store.pullsDone.Wait()
			if images, layers := e.counts(); images != 0 || layers != 0 {
				t.Errorf("after the failed pull: %d images, %d layers", images, layers)
			}
			if staged := e.stagingDirs(); len(staged) != 0 {
				t.Errorf("staging directories left: %v", staged)
			}
		})
	}
}

// A hostile layer cannot write outside its directory through a symlink or
// a "../" name; the pull fails or succeeds, but nothing appears outside.
func TestOnePassHostileTar(t *testing.T) {
	reg := newRegistry(t)
	outside := t.TempDir()
	rel := strings.Repeat("../", 12) + strings.TrimPrefix(outside, "/")
	cases := map[string][]byte{
		"abs":    testTar(t, tarEntry{hdr: tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: outside}}, fileEntry("abs/pwned", "x", 0)),
		"rel":    testTar(t, tarEntry{hdr: tar.Header{Name: "rel", Typeflag: tar.TypeSymlink, Linkname: rel}}, fileEntry("rel/pwned", "x", 0)),
		"dotdot": testTar(t, fileEntry("../../../../../../../../../../.."+outside+"/pwned", "x", 0)),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.insecure(reg.host)
			reg.pushRaw("test/hostile-"+name+":1", gzipLayer(t, data))
			_, err := e.store.Pull(testCtx(t), reg.ref("test/hostile-"+name+":1"), nil)
			t.Logf("Pull: %v", err)
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Fatalf("the layer wrote outside itself: %v", entries)
			}
			// Nor beside its staging directory.
			if _, err := os.Stat(filepath.Join(e.store.store.GraphRoot(), "overlay", "staging", "pwned")); err == nil {
				t.Error("the layer wrote beside its staging directory")
			}
			if staged := e.stagingDirs(); len(staged) != 0 {
				t.Errorf("staging directories left: %v", staged)
			}
		})
	}
}

// Layers are fetched in parallel, never more at a time than
// MaxConcurrentDownloads.
func TestOnePassParallelBound(t *testing.T) {
	reg := newRegistry(t)
	var layers []rawLayer
	for i := range 6 {
		layers = append(layers, gzipLayer(t, testTar(t, fileEntry(fmt.Sprintf("f%d", i), fmt.Sprint(i), 0))))
	}
	reg.pushRaw("test/wide:1", layers...)
	e := newEnv(t, func(c *Config) { c.MaxConcurrentDownloads = 2 })
	e.insecure(reg.host)
	reg.mu.Lock()
	reg.blobDelay = 150 * time.Millisecond
	reg.mu.Unlock()
	img, err := e.store.Pull(testCtx(t), reg.ref("test/wide:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.mu.Lock()
	most := reg.maxInFlight
	reg.mu.Unlock()
	if most != 2 {
		t.Errorf("at most %d blobs fetched at a time, want 2 (parallel, bounded)", most)
	}
	rec, err := e.store.store.Image(img.ID)
	if err != nil {
		t.Fatal(err)
	}
	if chain := e.layerChain(rec.TopLayer); len(chain) != 6 {
		t.Errorf("%d layers, want 6", len(chain))
	}
}

// A pull cancelled while layers are staged and one is committed leaves
// no image, no layer of its own and no staging directory.
func TestOnePassCancelLeavesNothing(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	layers := []rawLayer{gzipLayer(t, tars[0]), gzipLayer(t, tars[1]), gzipLayer(t, tars[2])}
	reg.pushRaw("test/cancel:1", layers...)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	arrived, release := reg.stallBlob(digest.FromBytes(layers[2].blob).String())
	defer release()
	pullCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Pull(pullCtx, reg.ref("test/cancel:1"), nil)
		done <- err
	}()
	<-arrived
	// Watched on disk: polling containers/storage while the pull writes
	// trips containers/storage v1.58's lockfile race under -race.
	waitFor(t, "two layers committed", func() bool {
		entries, _ := os.ReadDir(filepath.Join(e.store.store.GraphRoot(), "overlay"))
		n := 0
		for _, entry := range entries {
			if entry.Name() != "l" && entry.Name() != "staging" {
				n++
			}
		}
		return n == 2
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Pull = %v, want context.Canceled", err)
	}
	e.store.pullsDone.Wait()
	if images, n := e.counts(); images != 0 || n != 0 {
		t.Errorf("after cancel: %d images, %d layers", images, n)
	}
	if staged := e.stagingDirs(); len(staged) != 0 {
		t.Errorf("staging directories left: %v", staged)
	}
}

// Images pulled by copy.Image (an older podbayd) and by the one-pass pull
// share layers both ways: a layer in storage is not downloaded again.
func TestOnePassSharesLayersWithCopyImage(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	base := []rawLayer{gzipLayer(t, tars[0]), gzipLayer(t, tars[1])}
	reg.pushRaw("test/base:1", base...)
	reg.pushRaw("test/child:1", append(slices.Clone(base), gzipLayer(t, tars[2]))...)
	baseDigests := []string{digest.FromBytes(base[0].blob).String(), digest.FromBytes(base[1].blob).String()}

	for _, firstCopy := range []bool{true, false} {
		t.Run(fmt.Sprintf("copyImageFirst=%v", firstCopy), func(t *testing.T) {
			e := newEnv(t)
			e.insecure(reg.host)
			ctx := testCtx(t)
			e.store.copyPull = firstCopy
			first, err := e.store.Pull(ctx, reg.ref("test/base:1"), nil)
			if err != nil {
				t.Fatal(err)
			}
			reg.resetCounts()
			e.store.copyPull = !firstCopy
			second, err := e.store.Pull(ctx, reg.ref("test/child:1"), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range baseDigests {
				if n := reg.gets()[d]; n != 0 {
					t.Errorf("shared layer %s downloaded %d times", d, n)
				}
			}
			if _, layers := e.counts(); layers != 3 {
				t.Errorf("%d layers in storage, want 3", layers)
			}
			// Both resolve and the first is unchanged.
			for _, img := range []*Image{first, second} {
				if _, err := e.store.Status(ctx, img.ID); err != nil {
					t.Errorf("Status(%s): %v", img.ID, err)
				}
			}
		})
	}
}

// What the one-pass pull does not handle goes to copy.Image: here, a
// bzip2 layer.
func TestOnePassFallsBack(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	v1img := testImage(t, v1.Config{Cmd: []string{"/x"}}, false, map[string]string{"x": "y"})
	reg.push("test/plain:1", v1img)
	if _, err := e.store.Pull(testCtx(t), reg.ref("test/plain:1"), nil); err != nil {
		t.Fatal(err)
	}
	// A media type the one-pass pull does not read.
	l := gzipLayer(t, testTar(t, fileEntry("a", "b", 0)))
	l.mediaType = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
	_, id := reg.pushRaw("test/nondist:1", l)
	img, err := e.store.Pull(testCtx(t), reg.ref("test/nondist:1"), nil)
	if err != nil {
		t.Fatalf("Pull through the fallback: %v", err)
	}
	if img.ID != id {
		t.Errorf("ID = %s, want %s", img.ID, id)
	}
}

// A layer found to be xz-compressed once its download began sends the
// whole pull to copy.Image, which stores the image; nothing staged is left.
func TestOnePassFallsBackMidPull(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	var buf bytes.Buffer
	xw, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xw.Write(tars[1]); err != nil {
		t.Fatal(err)
	}
	if err := xw.Close(); err != nil {
		t.Fatal(err)
	}
	xzLayer := rawLayer{blob: buf.Bytes(), mediaType: imgspecv1.MediaTypeImageLayer, diffID: digest.FromBytes(tars[1])}
	_, id := reg.pushRaw("test/xz:1", gzipLayer(t, tars[0]), xzLayer, gzipLayer(t, tars[2]))
	e := newEnv(t)
	e.insecure(reg.host)
	img, err := e.store.Pull(testCtx(t), reg.ref("test/xz:1"), nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if img.ID != id {
		t.Errorf("ID = %s, want %s", img.ID, id)
	}
	e.store.pullsDone.Wait()
	if images, layers := e.counts(); images != 1 || layers != 3 {
		t.Errorf("%d images, %d layers; want 1, 3", images, layers)
	}
	if staged := e.stagingDirs(); len(staged) != 0 {
		t.Errorf("staging directories left: %v", staged)
	}
}

// A layer's tar-split goes to an unlinked file beside its staged
// directory, not to podbayd's memory (containers/storage v1.58 took it as
// bytes, and the pull fell back to copy.Image past a 256 MiB budget): a
// layer of many files stays on the one-pass path, its diff as storage
// rebuilds it from the tar-split is the layer's diffID, and the file is
// closed once the layer is committed.
func TestOnePassTarSplitOnDisk(t *testing.T) {
	reg := newRegistry(t)
	var entries []tarEntry
	for i := range 2000 {
		entries = append(entries, fileEntry(fmt.Sprintf("d%d/f%d", i%10, i), "", i%7))
	}
	// Padded to a 10 KiB record after the end-of-archive blocks, as GNU
	// tar writes: the padding is part of the diffID, so the tar-split
	// must hold it too.
	layer := testTar(t, entries...)
	layer = append(layer, make([]byte, 10240-len(layer)%10240)...)
	_, id := reg.pushRaw("test/many:1", gzipLayer(t, layer))
	e := newEnv(t)
	e.insecure(reg.host)
	var logs bytes.Buffer
	ctx := log.WithLogger(testCtx(t), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))

	fds := openFDs(t)
	img, err := e.store.Pull(ctx, reg.ref("test/many:1"), nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if img.ID != id {
		t.Errorf("ID = %s, want %s", img.ID, id)
	}
	if strings.Contains(logs.String(), "containers/image's copy") {
		t.Errorf("the pull fell back; log:\n%s", logs.String())
	}
	e.store.pullsDone.Wait()
	if staged := e.stagingDirs(); len(staged) != 0 {
		t.Errorf("staging directories left: %v", staged)
	}
	rec, err := e.store.store.Image(img.ID)
	if err != nil {
		t.Fatal(err)
	}
	chain := e.layerChain(rec.TopLayer)
	if len(chain) != 1 || chain[0].DiffDigest != digest.FromBytes(layer) {
		t.Errorf("the tar-split does not rebuild the layer: %+v, want diff %s", chain, digest.FromBytes(layer))
	}
	if after := openFDs(t); after > fds {
		t.Errorf("%d file descriptors open after the pull, %d before: a tar-split file left open", after, fds)
	}
}

// openFDs counts the test process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
