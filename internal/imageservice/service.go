// Package imageservice serves the CRI v1 ImageService on podbay's image
// store (internal/image): one RPC per file, each a translation between the
// CRI's messages and the store's. The errors it returns are errdefs
// classes, mapped to gRPC codes by the server's interceptor that every RPC
// runs through.
package imageservice

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
)

// Store is the image store as the ImageService uses it; internal/image
// implements it.
type Store interface {
	Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error)
	// PullForNamespace is Pull under the signature policy of a pod's
	// namespace ([image] signature_policy_dir).
	PullForNamespace(ctx context.Context, ref string, auth *image.Auth, namespace string) (*image.Image, error)
	Status(ctx context.Context, ref string) (*image.Image, error)
	List(ctx context.Context, filter string) ([]*image.Image, error)
	Remove(ctx context.Context, ref string) error
	FsInfo(ctx context.Context) (image.FsUsage, error)
}

// Options are the service's dependencies.
type Options struct {
	Store Store
	// Intercept is the server's unary interceptor, which StreamImages
	// runs ListImages through; nil: none (unit tests).
	Intercept grpc.UnaryServerInterceptor
	// WaitRemovals waits until the container removals being finished in
	// the background are done, or ctx ends (with an error then); nil:
	// there are none to wait for.
	WaitRemovals func(ctx context.Context) error
}

// Service serves the CRI ImageService on an image store.
type Service struct {
	runtimeapi.UnimplementedImageServiceServer
	store        Store
	intercept    grpc.UnaryServerInterceptor
	waitRemovals func(ctx context.Context) error
}

// New returns the service of opts.Store.
func New(opts Options) *Service {
	return &Service{store: opts.Store, intercept: opts.Intercept, waitRemovals: opts.WaitRemovals}
}

// ID is the CRI form of a storage image ID, as containerd reports it.
func ID(id string) string { return "sha256:" + id }

// StorageRef is the store's form of a CRI image reference or ID
// ("sha256:<hex>" included).
func StorageRef(ref string) string {
	if hex, ok := strings.CutPrefix(ref, "sha256:"); ok && len(hex) == 64 {
		return hex
	}
	return ref
}

func criImage(img *image.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id:          ID(img.ID),
		RepoTags:    img.RepoTags,
		RepoDigests: img.RepoDigests,
		Size:        img.Size,
		Username:    img.Username,
		Pinned:      img.Pinned,
		Spec:        &runtimeapi.ImageSpec{Image: ID(img.ID), Annotations: img.Annotations},
	}
	if img.UID != nil {
		out.Uid = &runtimeapi.Int64Value{Value: *img.UID}
	}
	return out
}

// errInvalid is a bad-input error: errdefs.ErrInvalidArgument, which the
// interceptor answers with gRPC InvalidArgument.
func errInvalid(msg string) error { return fmt.Errorf("%s: %w", msg, errdefs.ErrInvalidArgument) }
