package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
)

// RemoveImage removes an image by ID, tag or digest. Removing an image that
// is already gone succeeds (CRI spec); one in use by a container is
// FailedPrecondition.
func (s *imageService) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image reference is required")
	}
	if err := s.removeImageWaiting(ctx, storageRef(ref)); err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
