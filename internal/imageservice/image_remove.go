package imageservice

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
)

// RemoveImage removes an image by ID, tag or digest. Removing an image that
// is already gone succeeds (CRI spec); one in use by a container is
// FailedPrecondition.
func (s *Service) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image reference is required")
	}
	if err := s.removeWaiting(ctx, StorageRef(ref)); err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// removeWaiting is RemoveImage's removal: an image that is in use may be
// held only by containers whose removal is being finished, so those are
// waited for before trying again.
func (s *Service) removeWaiting(ctx context.Context, ref string) error {
	err := s.store.Remove(ctx, ref)
	if err == nil || !errors.Is(err, errdefs.ErrFailedPrecondition) || s.waitRemovals == nil {
		return err
	}
	if werr := s.waitRemovals(ctx); werr != nil {
		return err
	}
	return s.store.Remove(ctx, ref)
}
