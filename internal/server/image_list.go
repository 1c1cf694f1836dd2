package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages lists images, optionally those matching a reference.
func (s *imageService) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	imgs, err := s.store.List(ctx, storageRef(req.GetFilter().GetImage().GetImage()))
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range imgs {
		resp.Images = append(resp.Images, criImage(img))
	}
	return resp, nil
}
