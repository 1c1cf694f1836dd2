package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/signature"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// File is one entry of an imported image's single layer.
type File struct {
	// Path is the absolute path in the image ("/pause").
	Path string
	// Source is the host file whose content is copied; unused for a
	// directory.
	Source string
	// Mode is the permission bits, with fs.ModeDir for a directory.
	Mode fs.FileMode
}

// layerEpoch is the modification time of every imported entry: the same
// files and config always give the same image ID, so re-importing an
// unchanged pause binary at every start changes nothing.
var layerEpoch = time.Unix(0, 0).UTC()

// ImportFromFiles creates image ref (or moves ref to the new image) from
// one layer holding files (parent directories are added, root-owned, 0755)
// and cfg. It is how podbay makes its default pause image from the built-in
// pause binary on a node that cannot pull. An image that ref named before
// and that is now nameless and unused is removed.
func (s *Store) ImportFromFiles(ctx context.Context, ref string, files []File, cfg ImageConfig) (_ *Image, retErr error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("import %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	if _, ok := named.(reference.Digested); ok {
		return nil, fmt.Errorf("import %q: a digest reference cannot name a new image: %w", ref, errdefs.ErrInvalidArgument)
	}
	named = reference.TagNameOnly(named)
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) == "/" {
			return nil, fmt.Errorf("import %s: file path %q: %w", named, f.Path, errdefs.ErrInvalidArgument)
		}
	}

	s.layerWriters.RLock()
	defer func() {
		s.layerWriters.RUnlock()
		if retErr != nil {
			s.gcPending.Store(true)
		}
		s.collectOrphanLayers(ctx)
	}()

	var previous string
	if m, err := s.resolve(named.String()); err == nil {
		previous = m.img.ID
	}

	dir, err := os.MkdirTemp(s.tmpDir, "import-")
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", named, err)
	}
	defer os.RemoveAll(dir)
	if err := writeLayout(dir, files, cfg); err != nil {
		return nil, fmt.Errorf("import %s: %w", named, err)
	}
	src, err := layout.NewReference(dir, "")
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", named, err)
	}
	dest, err := istorage.Transport.NewStoreReference(s.store, named, "")
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", named, err)
	}
	// podbay built this image itself: the registry signature policy does
	// not apply.
	policy, err := signature.NewPolicyContext(acceptAnything())
	if err != nil {
		return nil, err
	}
	defer func() { _ = policy.Destroy() }()
	sys := &types.SystemContext{BigFilesTemporaryDir: s.tmpDir, BlobInfoCacheDir: s.cacheDir}
	var resolved types.ImageReference
	if _, err := copy.Image(ctx, policy, dest, src, &copy.Options{
		SourceCtx: sys, DestinationCtx: sys, ReportResolvedReference: &resolved,
	}); err != nil {
		return nil, fmt.Errorf("import %s: %w", named, err)
	}
	if resolved == nil {
		return nil, fmt.Errorf("import %s: storage reported no image", named)
	}
	_, stored, err := istorage.ResolveReference(resolved)
	if err != nil {
		return nil, fmt.Errorf("import %s: find stored image: %w", named, err)
	}
	if previous != "" && previous != stored.ID {
		s.removeIfDangling(ctx, previous)
	}
	img, err := s.toImage(stored)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", named, err)
	}
	log.G(ctx).Info("imported image", "ref", named.String(), "id", img.ID, "size", img.Size)
	return img, nil
}

// removeIfDangling removes image id if it has no name left and no root
// filesystem uses it.
func (s *Store) removeIfDangling(ctx context.Context, id string) {
	img, err := s.store.Image(id)
	if err != nil || img.ID != id || len(img.Names) > 0 {
		return
	}
	if err := s.deleteImage(id); err != nil {
		log.G(ctx).Debug("keep replaced image", "id", id, "err", err)
	}
}

// writeLayout writes an OCI image layout with one image into dir.
func writeLayout(dir string, files []File, cfg ImageConfig) error {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return err
	}
	layerDesc, err := writeLayer(blobs, files)
	if err != nil {
		return fmt.Errorf("write layer: %w", err)
	}
	config := imgspecv1.Image{
		Platform: imgspecv1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config: imgspecv1.ImageConfig{
			User:         cfg.User,
			Env:          cfg.Env,
			Entrypoint:   cfg.Entrypoint,
			Cmd:          cfg.Cmd,
			WorkingDir:   cfg.WorkingDir,
			Labels:       cfg.Labels,
			StopSignal:   cfg.StopSignal,
			Volumes:      toSet(cfg.Volumes),
			ExposedPorts: toSet(cfg.ExposedPorts),
		},
		RootFS: imgspecv1.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	}
	configDesc, err := writeJSONBlob(blobs, imgspecv1.MediaTypeImageConfig, config)
	if err != nil {
		return err
	}
	manifestDesc, err := writeJSONBlob(blobs, imgspecv1.MediaTypeImageManifest, imgspecv1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []imgspecv1.Descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(imgspecv1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageIndex,
		Manifests: []imgspecv1.Descriptor{manifestDesc},
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, imgspecv1.ImageIndexFile), index, 0o600); err != nil {
		return err
	}
	marker := `{"imageLayoutVersion":"` + imgspecv1.ImageLayoutVersion + `"}`
	return os.WriteFile(filepath.Join(dir, imgspecv1.ImageLayoutFile), []byte(marker), 0o600)
}

func toSet(keys []string) map[string]struct{} {
	if len(keys) == 0 {
		return nil
	}
	set := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		set[k] = struct{}{}
	}
	return set
}

func writeJSONBlob(blobs, mediaType string, v any) (imgspecv1.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return imgspecv1.Descriptor{}, err
	}
	d := digest.FromBytes(data)
	if err := os.WriteFile(filepath.Join(blobs, d.Encoded()), data, 0o600); err != nil {
		return imgspecv1.Descriptor{}, err
	}
	return imgspecv1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}, nil
}

// writeLayer writes an uncompressed tar of files, with their parent
// directories, into blobs.
func writeLayer(blobs string, files []File) (imgspecv1.Descriptor, error) {
	tmp, err := os.CreateTemp(blobs, "layer-")
	if err != nil {
		return imgspecv1.Descriptor{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	hash := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(tmp, hash)}
	tw := tar.NewWriter(counter)

	entries := map[string]File{}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean(f.Path), "/")
		entries[p] = f
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := entries[dir]; !ok {
				entries[dir] = File{Mode: fs.ModeDir | 0o755}
			}
		}
	}
	// Sorted, so a parent comes before its children and the tar is the
	// same every time.
	for _, p := range slices.Sorted(maps.Keys(entries)) {
		if err := writeEntry(tw, p, entries[p]); err != nil {
			return imgspecv1.Descriptor{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return imgspecv1.Descriptor{}, err
	}
	if err := tmp.Close(); err != nil {
		return imgspecv1.Descriptor{}, err
	}
	d := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(hash.Sum(nil)))
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, d.Encoded())); err != nil {
		return imgspecv1.Descriptor{}, err
	}
	return imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageLayer, Digest: d, Size: counter.n}, nil
}

func writeEntry(tw *tar.Writer, name string, f File) error {
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(f.Mode.Perm()),
		ModTime: layerEpoch,
		Format:  tar.FormatPAX,
	}
	if f.Mode&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if f.Mode&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if f.Mode&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	if f.Mode.IsDir() {
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	}
	if !f.Mode.IsRegular() {
		return fmt.Errorf("file %s: only regular files and directories can be imported: %w", name, errdefs.ErrInvalidArgument)
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", name, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("file %s: %w", name, err)
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if n, err := io.Copy(tw, src); err != nil || n != st.Size() {
		return fmt.Errorf("file %s: copied %d of %d bytes: %v", name, n, st.Size(), err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
