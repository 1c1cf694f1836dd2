package image

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

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
	benchPull(b, img, false)
}

// BenchmarkPullCopy is BenchmarkPull through containers/image's copy.Image
// (the pull before the one-pass pull).
func BenchmarkPullCopy(b *testing.B) {
	img, err := random.Image(2<<20, 1)
	if err != nil {
		b.Fatal(err)
	}
	benchPull(b, img, true)
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
	for _, path := range []string{"onepass", "copy"} {
		b.Run(path, func(b *testing.B) { benchPull(b, img, path == "copy") })
	}
}

// benchPull pulls img from a loopback registry b.N times, removing it
// (untimed) after each pull; copyPull pulls with copy.Image.
func benchPull(b *testing.B, img v1.Image, copyPull bool) {
	reg := newRegistry(b)
	e := newEnv(b)
	e.store.copyPull = copyPull
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

// BenchmarkPullMultiLayer compares the two pull paths on a five-layer
// image of about 80 MB unpacked (some 4,000 files, half text that
// compresses about 3:1, half incompressible bytes, gzip), from the
// loopback registry: "copy" is containers/image's copy.Image (each layer
// decompressed while it is written to a temporary file, then decompressed
// again and unpacked at commit, one after the other), "onepass" the
// one-pass pull (each layer decompressed once and unpacked as it
// downloads, three at a time). Each iteration removes the image
// (untimed), so that every pull downloads and unpacks all of it.
func BenchmarkPullMultiLayer(b *testing.B) {
	layers := benchMultiLayers(b)
	reg := newRegistry(b)
	reg.pushRaw("bench/multi:1", layers...)
	for _, path := range []string{"copy", "onepass", "onepass-serial"} {
		b.Run(path, func(b *testing.B) {
			e := newEnv(b, func(c *Config) {
				if path == "onepass-serial" {
					c.MaxConcurrentDownloads = 1
				}
			})
			e.store.copyPull = path == "copy"
			e.insecure(reg.host)
			ctx := testCtx(b)
			ref := reg.ref("bench/multi:1")
			// CPU time (the process's, registry included) says more than
			// wall time on a shared machine.
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				before := processCPU(b)
				got, err := e.store.Pull(ctx, ref, nil)
				if err != nil {
					b.Fatal(err)
				}
				cpu += processCPU(b) - before
				b.StopTimer()
				if err := e.store.Remove(ctx, got.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// processCPU is the user and system time the process has used.
func processCPU(b testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchMultiLayers makes BenchmarkPullMultiLayer's five gzip layers.
func benchMultiLayers(t testing.TB) []rawLayer {
	var layers []rawLayer
	rng := rand.New(rand.NewPCG(26, 3))
	words := strings.Fields("the quick brown fox jumps over a lazy dog podbay layer image pull registry digest stream zstd gzip tar overlay")
	for i := range 5 {
		var entries []tarEntry
		entries = append(entries, dirEntry(fmt.Sprintf("l%d/", i), 0o755))
		for f := range 800 {
			var body strings.Builder
			if f%2 == 0 {
				for body.Len() < 20<<10 {
					body.WriteString(words[rng.IntN(len(words))])
					body.WriteByte(" \n"[rng.IntN(2)])
				}
			} else {
				raw := make([]byte, 20<<10)
				for j := range raw {
					raw[j] = byte(rng.Uint32())
				}
				body.Write(raw)
			}
			entries = append(entries, fileEntry(fmt.Sprintf("l%d/f%d", i, f), body.String(), 0))
		}
		layers = append(layers, gzipLayer(t, testTar(t, entries...)))
	}
	return layers
}

// TestPullPathsInterleaved is BenchmarkPullMultiLayer as an A/B that
// alternates the two paths pull by pull, so that a shared machine's
// changing load falls on both alike; it logs each path's median wall and
// CPU time. Run by hand: PODBAY_PULL_AB=1 go test -run
// TestPullPathsInterleaved -v ./internal/image/ (TMPDIR on a tmpfs takes
// the disk out).
func TestPullPathsInterleaved(t *testing.T) {
	if os.Getenv("PODBAY_PULL_AB") == "" {
		t.Skip("a measurement; set PODBAY_PULL_AB=1 to run it")
	}
	reg := newRegistry(t)
	reg.pushRaw("bench/multi:1", benchMultiLayers(t)...)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	const rounds = 8
	wall := map[bool][]time.Duration{}
	cpu := map[bool][]time.Duration{}
	for i := range 2 * rounds {
		copyPull := i%2 == 0
		e.store.copyPull = copyPull
		c0, t0 := processCPU(t), time.Now()
		img, err := e.store.Pull(ctx, reg.ref("bench/multi:1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		wall[copyPull] = append(wall[copyPull], time.Since(t0))
		cpu[copyPull] = append(cpu[copyPull], processCPU(t)-c0)
		if err := e.store.Remove(ctx, img.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, copyPull := range []bool{true, false} {
		slices.Sort(wall[copyPull])
		slices.Sort(cpu[copyPull])
		name := map[bool]string{true: "copy", false: "onepass"}[copyPull]
		t.Logf("%s: wall p50 %v (min %v, max %v), CPU p50 %v", name, wall[copyPull][rounds/2].Round(time.Millisecond),
			wall[copyPull][0].Round(time.Millisecond), wall[copyPull][rounds-1].Round(time.Millisecond),
			cpu[copyPull][rounds/2].Round(time.Millisecond))
	}
}

// TestPullAfterRemove pulls an image made of the gzip layers in
// $PODBAY_PULL_LAYERS (layer-1.tar.gz, layer-2.tar.gz, …: hack/
// bench-compare.sh's realistic image is in _output/bench-image) six
// times, removing it after each pull as bench-compare does, and logs each
// pull's wall time, this process's CPU time (an external decompressor's
// not counted) and each layer's unpacking time. TMPDIR chooses the file
// system the storage lives on; $PODBAY_GZIP the gzip decompressor (auto).
// A measurement, run by hand:
//
//	PODBAY_PULL_LAYERS=$PWD/_output/bench-image TMPDIR=/mnt/x go test -run TestPullAfterRemove -v ./internal/image
//
// On ext4 without a journal every pull after the first is slower than the
// one before (docs/performance.md, "Against containerd 2.4 and CRI-O").
func TestPullAfterRemove(t *testing.T) {
	dir := os.Getenv("PODBAY_PULL_LAYERS")
	if dir == "" {
		t.Skip("a measurement; set PODBAY_PULL_LAYERS to a directory of layer-N.tar.gz")
	}
	var layers []rawLayer
	for i := 1; ; i++ {
		blob, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("layer-%d.tar.gz", i)))
		if errors.Is(err, os.ErrNotExist) && i > 1 {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob))
		if err != nil {
			t.Fatal(err)
		}
		h := digest.Canonical.Digester()
		if _, err := io.Copy(h.Hash(), zr); err != nil {
			t.Fatal(err)
		}
		layers = append(layers, rawLayer{blob: blob, mediaType: imgspecv1.MediaTypeImageLayerGzip, diffID: h.Digest()})
	}
	reg := newRegistry(t)
	reg.pushRaw("bench/layers:1", layers...)
	e := newEnv(t, func(c *Config) { c.GzipDecompressor = cmp.Or(os.Getenv("PODBAY_GZIP"), GzipDecompressorAuto) })
	e.insecure(reg.host)
	ctx := testCtx(t)
	var mu sync.Mutex
	var unpacks []time.Duration
	observe := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		unpacks = append(unpacks, d.Round(time.Millisecond))
	}
	layerUnpackObserver.Store(&observe)
	t.Cleanup(func() { layerUnpackObserver.Store(nil) })
	t.Logf("%d layers, storage in %s, gzip %s", len(layers), os.TempDir(), e.store.gunzip)
	for i := range 6 {
		mu.Lock()
		unpacks = nil
		mu.Unlock()
		c0, t0 := processCPU(t), time.Now()
		img, err := e.store.Pull(ctx, reg.ref("bench/layers:1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		wall, cpu := time.Since(t0), processCPU(t)-c0
		mu.Lock()
		t.Logf("pull %d: wall %v, CPU %v, layers unpacked in %v", i+1, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), unpacks)
		mu.Unlock()
		if err := e.store.Remove(ctx, img.ID); err != nil {
			t.Fatal(err)
		}
	}
}
