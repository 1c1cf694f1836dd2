package imageservice

import (
	"context"
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
)

// ImageStatus reports an image. Per the CRI spec an image that is not
// present is not an error: the response carries no image.
func (s *Service) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image reference is required")
	}
	img, err := s.store.Status(ctx, StorageRef(ref))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return &runtimeapi.ImageStatusResponse{}, nil
		}
		return nil, err
	}
	resp := &runtimeapi.ImageStatusResponse{Image: criImage(img)}
	if req.GetVerbose() {
		info, err := jsonString(img)
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": info}
	}
	return resp, nil
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
