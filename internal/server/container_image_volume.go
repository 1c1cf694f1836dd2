package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/specgen"
)

// Image volumes (KEP-4639): a CRI Mount whose image is set mounts that
// image's root filesystem, read-only, at container_path; image_sub_path
// picks a directory of it. The kubelet pulls the image first and passes
// PullImage's image_ref, so an image that is not present is NotFound. The
// image store mounts each image once, read-only, nosuid and nodev, and
// counts the containers holding it: RemoveImage refuses the image while one
// does. The container's record keeps the image and the directory bound in,
// so that removal (and a restart) releases them; a mount a crash left
// behind is collected after recovery.

// imageVolumeOptions are added to the bind of an image volume, whose
// runtime remount would otherwise drop the image mount's own.
var imageVolumeOptions = []string{"nosuid", "nodev"}

// containerMounts returns the record of the request's mounts ms. An
// image volume's image is looked up (and must be present) here, before
// anything is made, so that its ID is in the record persisted first.
func (s *Server) containerMounts(ctx context.Context, ms []podrequest.Mount) ([]container.Mount, error) {
	var out []container.Mount
	for _, m := range ms {
		cm := container.Mount{
			ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.Readonly,
			Propagation: m.Propagation, SelinuxRelabel: m.SelinuxRelabel,
			RecursiveReadOnly: m.RecursiveReadOnly, Options: m.Options,
		}
		if m.IsImageVolume() {
			ref := m.Image
			img, err := s.images.Status(ctx, storageRef(ref))
			if errdefs.IsNotFound(err) {
				return nil, fmt.Errorf("%w: image %q of the volume at %s is not present: %w",
					crierrors.ErrImageVolumeMountFailed, ref, m.ContainerPath, errdefs.ErrNotFound)
			}
			if err != nil {
				return nil, fmt.Errorf("image volume %s: %w", ref, err)
			}
			// Read-only whatever the request says: an image volume is
			// by definition (CRI api.proto, Mount.image).
			cm.Readonly = true
			cm.Image = img.ID
			cm.ImageRef = ref
			cm.ImageSubPath = m.ImageSubPath
		}
		out = append(out, cm)
	}
	return out, nil
}

// mountImageVolumes mounts the image volumes of c's record and records the
// directory each binds into the container. On an error what it mounted
// stays held by c: releaseImageVolumes releases it.
func (s *Server) mountImageVolumes(ctx context.Context, c *container.Container) error {
	rec := c.Record()
	if !slices.ContainsFunc(rec.Mounts, func(m container.Mount) bool { return m.Image != "" }) {
		return nil
	}
	mounts := slices.Clone(rec.Mounts)
	for i, m := range mounts {
		if m.Image == "" {
			continue
		}
		mp, _, err := s.images.MountVolume(ctx, m.Image, c.ID)
		if err != nil {
			return fmt.Errorf("%w: image %s at %s: %w", crierrors.ErrImageVolumeMountFailed, m.ImageRef, m.ContainerPath, err)
		}
		src := mp
		if m.ImageSubPath != "" {
			if src, err = imageSubPath(mp, m.ImageSubPath); err != nil {
				return fmt.Errorf("%w: image %s at %s: %w", crierrors.ErrImageVolumeMountFailed, m.ImageRef, m.ContainerPath, err)
			}
		}
		mounts[i].Source = src
	}
	c.Update(func(r *container.Record) { r.Mounts = mounts })
	return nil
}

// imageSubPath resolves sub inside the image mounted at root: it must be a
// directory of the image, reached without leaving it (a symlink pointing
// out of the image is refused, not followed). It returns the resolved
// path, free of symlinks.
func imageSubPath(root, sub string) (string, error) {
	f, err := os.OpenInRoot(root, sub)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("image_sub_path %q does not exist in the image: %w", sub, errdefs.ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("image_sub_path %q: %v: %w", sub, err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("image_sub_path %q: %w", sub, err)
	}
	if !st.IsDir() {
		// KEP-4639 mounts directories only; so do containerd and CRI-O.
		return "", fmt.Errorf("image_sub_path %q is not a directory of the image: %w", sub, errdefs.ErrInvalidArgument)
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return "", fmt.Errorf("image_sub_path %q: %w", sub, err)
	}
	if real != root && !strings.HasPrefix(real, root+"/") {
		return "", fmt.Errorf("image_sub_path %q resolves to %s, outside the image: %w", sub, real, errdefs.ErrInvalidArgument)
	}
	return real, nil
}

// imageVolumeMount is the spec mount of image volume m, mounted by
// mountImageVolumes.
func imageVolumeMount(m container.Mount, p specgen.Propagation) (specgen.Mount, error) {
	if m.Source == "" {
		return specgen.Mount{}, fmt.Errorf("image volume %s at %s is not mounted: %w", m.ImageRef, m.ContainerPath, errdefs.ErrInvalidArgument)
	}
	return specgen.Mount{
		ContainerPath: m.ContainerPath, HostPath: m.Source, Readonly: true,
		Propagation: p, Options: imageVolumeOptions,
	}, nil
}

// releaseImageVolumes releases the image volumes container id holds. It is
// idempotent.
func (s *Server) releaseImageVolumes(ctx context.Context, id string) error {
	if err := s.images.ReleaseVolumes(ctx, id); err != nil {
		return fmt.Errorf("release image volumes: %w", err)
	}
	return nil
}

// holdImageVolumes declares, after a restart, the image volumes of the
// reloaded container records, before anything is served: RemoveImage
// refuses their images, and the collection after recovery leaves their
// mounts alone.
func (s *Server) holdImageVolumes(ctx context.Context, recs []container.Record) {
	for _, rec := range recs {
		for _, m := range rec.Mounts {
			if m.Image == "" {
				continue
			}
			if err := s.images.HoldVolume(ctx, m.Image, rec.ID); err != nil {
				log.G(ctx).Warn("image of a container's image volume", "container", rec.ID, "image", m.Image, "err", err)
			}
		}
	}
}

// criImageVolume is the ContainerStatus form of m's image, nil for a host
// path mount.
func criImageVolume(m container.Mount) *runtimeapi.ImageSpec {
	if m.Image == "" {
		return nil
	}
	return &runtimeapi.ImageSpec{Image: imageID(m.Image), UserSpecifiedImage: m.ImageRef, ImageRef: imageID(m.Image)}
}
