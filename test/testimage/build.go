package testimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Artifact is what a Spec builds: an Image for one platform, or an Index of
// one image per platform. Exactly one is set.
type Artifact struct {
	Image v1.Image
	Index v1.ImageIndex
}

// Digest is the digest of the image's manifest or of the index.
func (a Artifact) Digest() (v1.Hash, error) {
	if a.Index != nil {
		return a.Index.Digest()
	}
	return a.Image.Digest()
}

// Builder builds images from Specs. It builds each base layer once and
// reuses it, so images that share a base share its blob. Safe for
// concurrent use.
type Builder struct {
	busybox string

	mu    sync.Mutex
	bases map[Base]*baseLayer // guarded by mu; BaseScratch never present
	arch  string              // guarded by mu; GOARCH of the busybox binary, "" until read
}

// baseLayer is a built base layer and the directories it holds.
type baseLayer struct {
	layer v1.Layer
	dirs  map[string]bool
}

// NewBuilder returns a Builder that copies the static busybox at busybox
// (DefaultBusybox when empty) into the busybox base layers. The binary is
// read at the first Build that needs it.
func NewBuilder(busybox string) *Builder {
	if busybox == "" {
		busybox = DefaultBusybox
	}
	return &Builder{busybox: busybox, bases: map[Base]*baseLayer{}}
}

// Build builds the image, or the index, that spec describes. The result
// depends only on spec and the busybox binary: building the same spec twice
// gives the same digest.
func (b *Builder) Build(ctx context.Context, spec Spec) (Artifact, error) {
	if err := spec.validate(); err != nil {
		return Artifact{}, fmt.Errorf("image %s: %w", spec.Repository, err)
	}
	a, err := b.build(ctx, spec)
	if err != nil {
		return Artifact{}, fmt.Errorf("image %s: %w", spec.Repository, err)
	}
	return a, nil
}

// mediaTypes are the media types of one Format.
type mediaTypes struct {
	manifest, config, layer, index types.MediaType
}

func (f Format) mediaTypes() mediaTypes {
	if f == DockerV2 {
		return mediaTypes{types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer, types.DockerManifestList}
	}
	return mediaTypes{types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer, types.OCIImageIndex}
}

func (b *Builder) build(ctx context.Context, spec Spec) (Artifact, error) {
	platforms, err := spec.platforms()
	if err != nil {
		return Artifact{}, err
	}
	var base *baseLayer
	arch := ""
	if spec.Base != BaseScratch {
		if base, arch, err = b.base(ctx, spec.Base); err != nil {
			return Artifact{}, err
		}
	}

	// The Files layer is the same for every platform; build it once.
	var files v1.Layer
	if len(spec.Files) > 0 {
		var below map[string]bool
		if base != nil {
			below = base.dirs
		}
		if files, err = filesLayer(spec.Files, below); err != nil {
			return Artifact{}, err
		}
	}

	// So are the raw layers.
	raws := make([]v1.Layer, 0, len(spec.RawLayers))
	for _, raw := range spec.RawLayers {
		raws = append(raws, rawLayer(raw))
	}
	for i, gz := range spec.CompressedLayers {
		l, err := compressedLayer(gz)
		if err != nil {
			return Artifact{}, fmt.Errorf("compressed layer %d: %w", i, err)
		}
		raws = append(raws, l)
	}

	mt := spec.Format.mediaTypes()
	images := make([]v1.Image, 0, len(platforms))
	for _, p := range platforms {
		var first v1.Layer
		switch {
		case base == nil:
		case p.OS == "linux" && p.Architecture == arch:
			first = base.layer
		default:
			if first, err = standInLayer(p); err != nil {
				return Artifact{}, err
			}
		}
		img, err := platformImage(p, spec, mt, first, files, raws)
		if err != nil {
			return Artifact{}, fmt.Errorf("platform %s: %w", platformString(p), err)
		}
		images = append(images, img)
	}
	if len(platforms) == 1 {
		return Artifact{Image: images[0]}, nil
	}

	idx := mutate.IndexMediaType(empty.Index, mt.index)
	adds := make([]mutate.IndexAddendum, 0, len(images))
	for i, img := range images {
		p := platforms[i]
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return Artifact{Index: mutate.AppendManifests(idx, adds...)}, nil
}

// platformImage assembles one platform's image from its layers; base and
// files may be nil.
func platformImage(p v1.Platform, spec Spec, mt mediaTypes, base, files v1.Layer, raws []v1.Layer) (v1.Image, error) {
	created := v1.Time{Time: epoch()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, mt.manifest), mt.config)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config:       spec.Config.imageConfig(),
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	var adds []mutate.Addendum
	if base != nil {
		adds = append(adds, mutate.Addendum{Layer: base, MediaType: mt.layer, History: v1.History{
			Created: created, CreatedBy: "podbay testimage: base " + spec.Base.String(),
		}})
	}
	if files != nil {
		adds = append(adds, mutate.Addendum{Layer: files, MediaType: mt.layer, History: v1.History{
			Created: created, CreatedBy: fmt.Sprintf("podbay testimage: %d files", len(spec.Files)),
		}})
	}
	for i, l := range raws {
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: mt.layer, History: v1.History{
			Created: created, CreatedBy: fmt.Sprintf("podbay testimage: raw layer %d", i),
		}})
	}
	if len(adds) == 0 {
		return img, nil
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	return img, nil
}

// base returns the base layer kind, built on first use, and the GOARCH of
// the busybox binary. The lock is held while building so concurrent Builds
// do not each read and compress busybox; no other I/O waits on it.
func (b *Builder) base(ctx context.Context, kind Base) (*baseLayer, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.arch == "" {
		arch, err := elfArch(b.busybox)
		if err != nil {
			return nil, "", err
		}
		b.arch = arch
	}
	if l, ok := b.bases[kind]; ok {
		return l, b.arch, nil
	}
	var (
		t   *tree
		err error
	)
	switch kind {
	case BaseBusybox:
		t, err = busyboxTree(ctx, b.busybox)
	case BaseBusyboxBinary:
		t, err = busyboxBinaryTree(b.busybox)
	default:
		return nil, "", fmt.Errorf("no base layer for %v", kind)
	}
	if err != nil {
		return nil, "", err
	}
	l, err := treeLayer(t)
	if err != nil {
		return nil, "", fmt.Errorf("base %v: %w", kind, err)
	}
	bl := &baseLayer{layer: l, dirs: t.dirs()}
	b.bases[kind] = bl
	return bl, b.arch, nil
}

// treeLayer archives t as a layer.
func treeLayer(t *tree) (v1.Layer, error) {
	tarball, gz, err := t.archive()
	if err != nil {
		return nil, err
	}
	return newMemLayer(tarball, gz), nil
}

// rawLayer makes a layer of the uncompressed tar raw, as given.
func rawLayer(raw []byte) v1.Layer {
	return newMemLayer(raw, gzipBytes(raw))
}

// compressedLayer makes the layer of the gzip-compressed tar gz, served
// as given.
func compressedLayer(gz []byte) (v1.Layer, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	tarball, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	return newMemLayer(tarball, gz), nil
}

// filesLayer makes the layer of a Spec's Files over a base that has the
// directories below.
func filesLayer(files []File, below map[string]bool) (v1.Layer, error) {
	t := newTree()
	for _, f := range files {
		if err := t.addFile(f); err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
	}
	if err := t.addParents(below); err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	l, err := treeLayer(t)
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	return l, nil
}

// standInLayer is the base layer of a platform busybox cannot run on.
func standInLayer(p v1.Platform) (v1.Layer, error) {
	t, err := standInTree(p)
	if err != nil {
		return nil, fmt.Errorf("stand-in layer: %w", err)
	}
	l, err := treeLayer(t)
	if err != nil {
		return nil, fmt.Errorf("stand-in layer: %w", err)
	}
	return l, nil
}
