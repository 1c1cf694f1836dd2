package image

import (
	"context"
	"errors"
	"fmt"

	"github.com/containers/image/v5/docker/reference"
	"github.com/containers/storage"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Remove removes ref: by ID (or unique prefix) the image with all its
// names; by a name (tag or repo@digest) that name only while the image
// keeps another tag, else the image; by a digest the image holds but is
// not named by, the image. An image a root filesystem was created from, or
// that an image volume mounts, is ErrFailedPrecondition; an unknown ref
// ErrNotFound (the CRI server makes RemoveImage idempotent).
func (s *Store) Remove(ctx context.Context, ref string) error {
	m, err := s.resolve(ref)
	if err != nil {
		return err
	}
	if m.kind == matchName && hasOtherTag(m.img, m.name) {
		if err := s.store.RemoveNames(m.img.ID, []string{m.name}); err != nil {
			return fmt.Errorf("untag %s: %w", m.name, err)
		}
		log.G(ctx).Info("untagged image", "ref", m.name, "id", m.img.ID)
		return nil
	}
	if err := s.deleteImage(m.img.ID); err != nil {
		return err
	}
	log.G(ctx).Info("removed image", "ref", ref, "id", m.img.ID, "names", m.img.Names)
	return nil
}

func (s *Store) deleteImage(id string) error {
	if img, err := s.store.Image(id); err == nil && img.TopLayer != "" {
		// Under the lock of its top layer: no image volume mounts it
		// meanwhile.
		unlock := s.vols.lock(img.TopLayer)
		defer unlock()
		if err := s.volumeInUse(img); err != nil {
			return err
		}
	}
	defer s.forgetImage(id)
	_, err := s.store.DeleteImage(id, true)
	switch {
	case errors.Is(err, storage.ErrImageUsedByContainer):
		return fmt.Errorf("remove image %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	case errors.Is(err, storage.ErrImageUnknown):
		return fmt.Errorf("remove image %s: %w", id, errdefs.ErrNotFound)
	case err != nil:
		return fmt.Errorf("remove image %s: %w", id, err)
	}
	return nil
}

// hasOtherTag reports whether img has a tag besides name. Digest names do
// not count: once its last tag is gone, an image is removed, as docker
// does.
func hasOtherTag(img *storage.Image, name string) bool {
	for _, n := range img.Names {
		if n == name {
			continue
		}
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		if _, digested := named.(reference.Canonical); !digested {
			return true
		}
	}
	return false
}
