package server

import (
	"context"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/imageservice"
)

// ImageStore is the image store as the server uses it: the ImageService's
// (internal/imageservice) and the containers' root filesystems and image
// volumes; internal/image implements it.
type ImageStore interface {
	imageservice.Store
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

// newImageService is the CRI ImageService on s's image store, its RPCs
// run through s's interceptor, RemoveImage waiting for s's background
// container removals.
func (s *Server) newImageService() *imageservice.Service {
	return imageservice.New(imageservice.Options{
		Store:        s.images,
		Intercept:    s.unaryInterceptor,
		WaitRemovals: func(ctx context.Context) error { return s.removals.wait(ctx, "") },
	})
}

// imageID is the CRI form of a storage image ID (imageservice.ID).
func imageID(id string) string { return imageservice.ID(id) }

// storageRef is the store's form of a CRI image reference or ID
// (imageservice.StorageRef).
func storageRef(ref string) string { return imageservice.StorageRef(ref) }
