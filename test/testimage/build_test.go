package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"reflect"
	"runtime"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func mustBuild(t *testing.T, b *Builder, spec Spec) Artifact {
	t.Helper()
	a, err := b.Build(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustDigest(t *testing.T, a Artifact) v1.Hash {
	t.Helper()
	d, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBuildDeterministic(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	first, second := NewBuilder(""), NewBuilder(DefaultBusybox)
	for _, spec := range DefaultImages(DefaultOptions{Prefix: "test"}) {
		d1 := mustDigest(t, mustBuild(t, first, spec))
		d2 := mustDigest(t, mustBuild(t, second, spec))
		again := mustDigest(t, mustBuild(t, first, spec))
		if d1 != d2 || d1 != again {
			t.Errorf("%s: digests %s, %s, %s; want one", spec.Repository, d1, d2, again)
		}
	}
}

func TestBuildConfig(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	var spec Spec
	for _, s := range DefaultImages(DefaultOptions{}) {
		if s.Repository == "config" {
			spec = s
		}
	}
	img := mustBuild(t, sharedBuilder(), spec).Image
	if img == nil {
		t.Fatal("single-platform spec built an index")
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.WorkingDir != "/srv/app" || c.StopSignal != "SIGUSR1" || c.User != "" ||
		!reflect.DeepEqual(c.Entrypoint, []string{"/bin/echo", "entrypoint"}) ||
		!reflect.DeepEqual(c.Cmd, []string{"cmd"}) ||
		!reflect.DeepEqual(c.Env, []string{DefaultPath, "GREETING=hello world", "EMPTY="}) ||
		!reflect.DeepEqual(c.Volumes, map[string]struct{}{"/data": {}, "/cache": {}}) ||
		!reflect.DeepEqual(c.ExposedPorts, map[string]struct{}{"8080/tcp": {}, "53/udp": {}}) ||
		c.Labels["io.podbay.test"] != "config" {
		t.Errorf("config: %+v", c)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Created.Unix() != Epoch {
		t.Errorf("config file: os %s arch %s created %v", cf.OS, cf.Architecture, cf.Created)
	}
	if len(cf.History) != 2 || len(cf.RootFS.DiffIDs) != 2 {
		t.Errorf("history %d entries, %d diffIDs; want 2 each", len(cf.History), len(cf.RootFS.DiffIDs))
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	m := byName(readLayer(t, layers[1]))
	if string(m["srv/app/hello.txt"].data) != "hello from the image\n" {
		t.Error("files layer lacks srv/app/hello.txt")
	}
	if _, ok := m["srv/app"]; !ok {
		t.Error("files layer lacks the working directory srv/app")
	}
}

func TestBuildFormats(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	b := sharedBuilder()
	for _, tc := range []struct {
		format                  Format
		manifest, config, layer types.MediaType
	}{
		{OCI, types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer},
		{DockerV2, types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer},
	} {
		img := mustBuild(t, b, Spec{Repository: "test/f", Format: tc.format}).Image
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.MediaType != tc.manifest || m.Config.MediaType != tc.config || len(m.Layers) != 1 || m.Layers[0].MediaType != tc.layer {
			t.Errorf("%v: manifest %s config %s layers %+v", tc.format, m.MediaType, m.Config.MediaType, m.Layers)
		}
	}
}

func TestBuildBases(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	b := sharedBuilder()
	full := mustBuild(t, b, Spec{Repository: "test/a"}).Image
	binary := mustBuild(t, b, Spec{Repository: "test/a", Base: BaseBusyboxBinary}).Image
	scratch := mustBuild(t, b, Spec{Repository: "test/a", Base: BaseScratch}).Image
	scratchFiles := mustBuild(t, b, Spec{Repository: "test/a", Base: BaseScratch, Files: []File{{Path: "/x"}}}).Image

	count := func(img v1.Image) int {
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		return len(ls)
	}
	if n := count(scratch); n != 0 {
		t.Errorf("scratch without files: %d layers", n)
	}
	if n := count(scratchFiles); n != 1 {
		t.Errorf("scratch with files: %d layers", n)
	}
	ls, _ := binary.Layers()
	names := byName(readLayer(t, ls[0]))
	if len(names) != 2 || names["bin/busybox"].hdr == nil {
		t.Errorf("busybox-binary base holds %d entries", len(names))
	}

	// Images with the same base share its blob.
	other := mustBuild(t, b, Spec{Repository: "test/b", Config: Config{User: "1000"}, Files: []File{{Path: "/y"}}}).Image
	l1, _ := full.Layers()
	l2, _ := other.Layers()
	d1, _ := l1[0].Digest()
	d2, _ := l2[0].Digest()
	if d1 != d2 {
		t.Errorf("busybox base differs between images: %s, %s", d1, d2)
	}
}

func TestBuildIndex(t *testing.T) {
	t.Parallel()
	needBusybox(t)
	b := sharedBuilder()
	a := mustBuild(t, b, Spec{Repository: "test/m", Platforms: []string{"linux/amd64", "linux/arm64", "linux/arm/v7"}})
	if a.Index == nil || a.Image != nil {
		t.Fatal("multi-platform spec did not build an index alone")
	}
	im, err := a.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 3 {
		t.Fatalf("index %s with %d manifests", im.MediaType, len(im.Manifests))
	}
	host, _ := mustBuild(t, b, Spec{Repository: "test/h"}).Image.Layers()
	bbDigest, _ := host[0].Digest()
	want := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}, {OS: "linux", Architecture: "arm", Variant: "v7"}}
	for i, desc := range im.Manifests {
		if desc.Platform == nil || !desc.Platform.Equals(want[i]) || desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d: platform %+v media type %s", i, desc.Platform, desc.MediaType)
			continue
		}
		img, err := a.Index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != want[i].Architecture || cf.Variant != want[i].Variant {
			t.Errorf("%s: config says %s/%s", platformString(want[i]), cf.Architecture, cf.Variant)
		}
		ls, _ := img.Layers()
		d, _ := ls[0].Digest()
		if real := want[i].Architecture == runtime.GOARCH; real != (d == bbDigest) {
			t.Errorf("%s: base layer %s, busybox layer %s", platformString(want[i]), d, bbDigest)
		}
		if want[i].Architecture != runtime.GOARCH {
			if _, ok := byName(readLayer(t, ls[0]))["etc/testimage-stand-in"]; !ok {
				t.Errorf("%s: stand-in layer lacks its note", platformString(want[i]))
			}
		}
	}

	docker := mustBuild(t, b, Spec{Repository: "test/m", Format: DockerV2, Platforms: []string{"linux/amd64", "linux/arm64"}})
	if mt, _ := docker.Index.MediaType(); mt != types.DockerManifestList {
		t.Errorf("docker index media type %s", mt)
	}

	single := mustBuild(t, b, Spec{Repository: "test/m", Platforms: []string{"linux/arm64"}})
	if single.Image == nil {
		t.Error("one explicit platform built an index")
	}
}

func TestSpecValidate(t *testing.T) {
	for name, spec := range map[string]Spec{
		"no repository":     {},
		"upper case":        {Repository: "Test/busybox"},
		"empty component":   {Repository: "test//a"},
		"leading separator": {Repository: "test/-a"},
		"registry in name":  {Repository: "bad repo"},
		"bad tag":           {Repository: "test/a", Tags: []string{"a:b"}},
		"empty tag":         {Repository: "test/a", Tags: []string{""}},
		"duplicate tag":     {Repository: "test/a", Tags: []string{"x", "x"}},
		"unknown base":      {Repository: "test/a", Base: Base(9)},
		"unknown format":    {Repository: "test/a", Format: Format(9)},
		"platform no arch":  {Repository: "test/a", Platforms: []string{"linux"}},
		"platform too long": {Repository: "test/a", Platforms: []string{"linux/arm/v7/x"}},
		"platform twice":    {Repository: "test/a", Platforms: []string{"linux/amd64", "linux/amd64"}},
		"platform version":  {Repository: "test/a", Platforms: []string{"windows/amd64:10.0"}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := spec.validate(); err == nil {
				t.Fatal("valid")
			}
			if _, err := NewBuilder("/nonexistent").Build(context.Background(), spec); err == nil {
				t.Fatal("Build accepted the spec")
			}
		})
	}
	ok := Spec{Repository: "test/busy-box_1.x", Tags: []string{"latest", "1.36", "v1_2-3"}, Platforms: []string{"linux/arm/v7"}}
	if err := ok.validate(); err != nil {
		t.Errorf("valid spec refused: %v", err)
	}
}

func TestReferences(t *testing.T) {
	s := Spec{Repository: "test/busybox", Tags: []string{"latest", "1.36"}}
	got := s.References("127.0.0.1:5000")
	want := []string{"127.0.0.1:5000/test/busybox:latest", "127.0.0.1:5000/test/busybox:1.36"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("References = %v, want %v", got, want)
	}
}

// TestBuildRawLayers: raw layers follow the Files layer, each exactly the
// tar given, unchecked.
func TestBuildRawLayers(t *testing.T) {
	t.Parallel()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Repository: "test/raw", Base: BaseScratch,
		Files: []File{{Path: "/a", Content: []byte("a")}}, RawLayers: [][]byte{tb.Bytes(), tb.Bytes()}}
	img := mustBuild(t, NewBuilder(""), spec).Image
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 {
		t.Fatalf("%d layers, want the files layer and two raw ones", len(layers))
	}
	rc, err := layers[2].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, tb.Bytes()) {
		t.Error("raw layer's tar differs from the one given")
	}
	if again := mustDigest(t, mustBuild(t, NewBuilder(""), spec)); again != mustDigest(t, Artifact{Image: img}) {
		t.Error("raw layers do not build deterministically")
	}
}

// TestBuildCompressedLayers: compressed layers follow the raw ones, served
// as the gzip given, their diff ID the tar's; a layer that is not gzip is
// an error.
func TestBuildCompressedLayers(t *testing.T) {
	t.Parallel()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "b", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	gz := gzipBytes(tb.Bytes())
	spec := Spec{Repository: "test/gz", Base: BaseScratch, RawLayers: [][]byte{tb.Bytes()}, CompressedLayers: [][]byte{gz}}
	img := mustBuild(t, NewBuilder(""), spec).Image
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want the raw layer and the compressed one", len(layers))
	}
	rc, err := layers[1].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, gz) {
		t.Error("compressed layer differs from the one given")
	}
	d0, _ := layers[0].DiffID()
	d1, _ := layers[1].DiffID()
	if d0 != d1 {
		t.Error("the compressed layer's diff ID is not its tar's")
	}
	if _, err := NewBuilder("").Build(context.Background(), Spec{Repository: "test/gz", Base: BaseScratch, CompressedLayers: [][]byte{tb.Bytes()}}); err == nil {
		t.Error("a compressed layer that is not gzip built")
	}
}
