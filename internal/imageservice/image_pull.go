package imageservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/image"
)

// PullImage pulls an image with the request's credentials and returns its
// ID, which the kubelet passes back in CreateContainer.
func (s *Service) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image reference is required")
	}
	var auth *image.Auth
	if a := req.GetAuth(); a != nil {
		auth = &image.Auth{
			Username: a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(),
			IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken(),
		}
	}
	// The pod's namespace chooses the signature policy
	// ([image] signature_policy_dir).
	img, err := s.store.PullForNamespace(ctx, ref, auth, req.GetSandboxConfig().GetMetadata().GetNamespace())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: ID(img.ID)}, nil
}
