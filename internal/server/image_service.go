package server

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// imageService answers every ImageService RPC with Unimplemented until the
// image store is built (see README, "Not yet built").
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
}
