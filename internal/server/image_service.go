package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/image"
)

// ImageStore is the image store as the server uses it; internal/image
// implements it.
type ImageStore interface {
	Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error)
	// PullForNamespace is Pull under the policy of a pod's namespace.
	PullForNamespace(ctx context.Context, ref string, auth *image.Auth, namespace string) (*image.Image, error)
	Status(ctx context.Context, ref string) (*image.Image, error)
	List(ctx context.Context, filter string) ([]*image.Image, error)
	Remove(ctx context.Context, ref string) error
	FsInfo(ctx context.Context) (image.FsUsage, error)
	ImportFromFiles(ctx context.Context, ref string, files []image.File, cfg image.ImageConfig) (*image.Image, error)
	CreateRootfs(ctx context.Context, id, imageID string, opts image.RootfsOptions) (string, error)
	RemoveRootfs(ctx context.Context, id string) error
	Rootfses(ctx context.Context) ([]string, error)
	RootfsUsage(ctx context.Context, id string) (image.FsUsage, error)
	// RootfsChanges lists a container's root filesystem changes, for its
	// checkpoint.
	RootfsChanges(ctx context.Context, id string) ([]checkpoint.Change, error)

	// The image volumes (container_image_volume.go): an image mounted
	// read-only for the containers that own it.
	MountVolume(ctx context.Context, ref, owner string) (mountpoint, imageID string, err error)
	HoldVolume(ctx context.Context, imageID, owner string) error
	ReleaseVolumes(ctx context.Context, owner string) error
	CollectVolumes(ctx context.Context) ([]string, error)

	// The store's reloadable settings (Reload).
	SetRegistries(image.Registries)
	SetPinned(refs []string) error
}

// imageService serves the CRI ImageService on the image store.
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	store ImageStore
	// intercept is the server's unary interceptor, which StreamImages
	// runs ListImages through; nil in unit tests.
	intercept grpc.UnaryServerInterceptor
	// removals are the server's container removals being finished in
	// the background; nil in unit tests.
	removals *containerRemovals
}

// imageID is the CRI form of a storage image ID, as containerd reports it.
func imageID(id string) string { return "sha256:" + id }

// storageRef accepts a CRI image reference or ID ("sha256:<hex>" included).
func storageRef(ref string) string {
	if hex, ok := strings.CutPrefix(ref, "sha256:"); ok && len(hex) == 64 {
		return hex
	}
	return ref
}

func criImage(img *image.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id:          imageID(img.ID),
		RepoTags:    img.RepoTags,
		RepoDigests: img.RepoDigests,
		Size:        img.Size,
		Username:    img.Username,
		Pinned:      img.Pinned,
		Spec:        &runtimeapi.ImageSpec{Image: imageID(img.ID), Annotations: img.Annotations},
	}
	if img.UID != nil {
		out.Uid = &runtimeapi.Int64Value{Value: *img.UID}
	}
	return out
}
