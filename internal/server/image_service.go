package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
)

// ImageStore is the image store as the server uses it; internal/image
// implements it.
type ImageStore interface {
	Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error)
	Status(ctx context.Context, ref string) (*image.Image, error)
	List(ctx context.Context, filter string) ([]*image.Image, error)
	Remove(ctx context.Context, ref string) error
	FsInfo(ctx context.Context) (image.FsUsage, error)
	ImportFromFiles(ctx context.Context, ref string, files []image.File, cfg image.ImageConfig) (*image.Image, error)
	CreateRootfs(ctx context.Context, id, imageID string, opts image.RootfsOptions) (string, error)
	RemoveRootfs(ctx context.Context, id string) error
	Rootfses(ctx context.Context) ([]string, error)
	RootfsUsage(ctx context.Context, id string) (image.FsUsage, error)
}

// imageService serves the CRI ImageService on the image store.
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	store ImageStore
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

// PullImage pulls an image with the request's credentials and returns its
// ID, which the kubelet passes back in CreateContainer.
func (s *imageService) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
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
	img, err := s.store.Pull(ctx, ref, auth)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: imageID(img.ID)}, nil
}

// ImageStatus reports an image. Per the CRI spec an image that is not
// present is not an error: the response carries no image.
func (s *imageService) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image reference is required")
	}
	img, err := s.store.Status(ctx, storageRef(ref))
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

// RemoveImage removes an image by ID, tag or digest. Removing an image that
// is already gone succeeds (CRI spec); one in use by a container is
// FailedPrecondition.
func (s *imageService) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image reference is required")
	}
	if err := s.store.Remove(ctx, storageRef(ref)); err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo reports the image filesystem's usage, which the kubelet's
// image garbage collection acts on.
func (s *imageService) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	u, err := s.store.FsInfo(ctx)
	if err != nil {
		return nil, err
	}
	fs := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
		UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{fs}}, nil
}

func errInvalid(msg string) error { return fmt.Errorf("%s: %w", msg, errdefs.ErrInvalidArgument) }

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
