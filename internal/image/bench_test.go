package image

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/podbay/podbay/test/testimage"
)

// BenchmarkPull measures a pull of a ~2 MB single-layer image over
// loopback into overlay storage, removing it after each pull so that every
// iteration downloads and unpacks it. (containerd 1.6 on this machine:
// 11–19 ms p50 for a 2.4 MB image.)
func BenchmarkPull(b *testing.B) {
	img, err := random.Image(2<<20, 1)
	if err != nil {
		b.Fatal(err)
	}
	benchPull(b, img)
}

// BenchmarkPullBusybox is BenchmarkPull with the image the benchmarks
// against containerd pull (make bench-compare): Debian's static busybox,
// a hard link per applet (testimage.BusyboxLayer).
func BenchmarkPullBusybox(b *testing.B) {
	if _, err := os.Stat(testimage.DefaultBusybox); err != nil {
		b.Skipf("no busybox to build the image from: %v", err)
	}
	layer, err := testimage.BusyboxLayer(testCtx(b), "")
	if err != nil {
		b.Fatal(err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		b.Fatal(err)
	}
	benchPull(b, img)
}

// benchPull pulls img from a loopback registry b.N times, removing it
// (untimed) after each pull.
func benchPull(b *testing.B, img v1.Image) {
	reg := newRegistry(b)
	e := newEnv(b)
	e.insecure(reg.host)
	ctx := testCtx(b)
	reg.push("bench/image:1", img)
	ref := reg.ref("bench/image:1")
	b.ResetTimer()
	for range b.N {
		got, err := e.store.Pull(ctx, ref, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := e.store.Remove(ctx, got.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkLookup100 measures Status and List with 100 images in storage.
func BenchmarkLookup100(b *testing.B) {
	e := newEnv(b)
	ctx := testCtx(b)
	src := filepath.Join(b.TempDir(), "f")
	var ids []string
	for i := range 100 {
		if err := os.WriteFile(src, []byte(fmt.Sprint(i)), 0o644); err != nil {
			b.Fatal(err)
		}
		img, err := e.store.ImportFromFiles(ctx, fmt.Sprintf("example.com/bench/img%d:v1", i),
			[]File{{Path: "/f", Source: src, Mode: 0o644}}, ImageConfig{Cmd: []string{"/f"}})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, img.ID)
	}
	b.Run("StatusByTag", func(b *testing.B) {
		for i := range b.N {
			if _, err := e.store.Status(ctx, fmt.Sprintf("example.com/bench/img%d:v1", i%100)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StatusByID", func(b *testing.B) {
		for i := range b.N {
			if _, err := e.store.Status(ctx, ids[i%100]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StatusByIDPrefix", func(b *testing.B) {
		for i := range b.N {
			if _, err := e.store.Status(ctx, ids[i%100][:12]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List", func(b *testing.B) {
		for range b.N {
			list, err := e.store.List(ctx, "")
			if err != nil || len(list) != 100 {
				b.Fatal(len(list), err)
			}
		}
	})
	b.Run("ListUncached", func(b *testing.B) {
		for range b.N {
			e.store.mu.Lock()
			clear(e.store.info)
			e.store.mu.Unlock()
			if _, err := e.store.List(ctx, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}
