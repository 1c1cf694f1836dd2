package imageservice

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/liststream"
)

// ListImages lists images, optionally those matching a reference.
func (s *Service) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	imgs, err := s.store.List(ctx, StorageRef(req.GetFilter().GetImage().GetImage()))
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range imgs {
		resp.Images = append(resp.Images, criImage(img))
	}
	return resp, nil
}

// StreamImages is ListImages as a stream (internal/liststream).
func (s *Service) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	return liststream.Via(stream.Context(), s.intercept, runtimeapi.ImageService_StreamImages_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.Image, error) {
			r, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
			return r.GetImages(), err
		},
		func(c []*runtimeapi.Image) error {
			return stream.Send(&runtimeapi.StreamImagesResponse{Images: c})
		})
}
