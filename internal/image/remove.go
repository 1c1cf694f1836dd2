package image

import (
	"context"
	"errors"
	"fmt"

	"go.podman.io/storage"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Remove removes the image ref names (by ID or unique prefix, tag,
// repo@digest, or a digest it holds) with all its names: cri-api v0.36+
// says removing an image by one of several tags removes every tag, even
// across repositories. An image a root filesystem was created from, or
// that an image volume mounts, is ErrFailedPrecondition; an unknown ref
// ErrNotFound (the CRI server makes RemoveImage idempotent). An image that
// resolved but vanished before it could be deleted (a concurrent Remove of
// the same image won) is removed: nil.
func (s *Store) Remove(ctx context.Context, ref string) error {
	m, err := s.resolve(ref)
	if err != nil {
		return err
	}
	if err := s.deleteImage(m.img.ID); err != nil {
		return err
	}
	log.G(ctx).Info("removed image", "ref", ref, "id", m.img.ID, "names", m.img.Names)
	return nil
}

// deleteImage deletes image id from the storage. An id the storage no
// longer holds is success: the image is gone, whoever removed it.
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
	case errors.Is(err, storage.ErrImageUnknown), errors.Is(err, storage.ErrNotAnImage):
		// Deleted meanwhile by a concurrent removal (containers/storage
		// answers ErrNotAnImage for an ID it no longer holds).
		return nil
	case err != nil:
		return fmt.Errorf("remove image %s: %w", id, err)
	}
	return nil
}
