package imageservice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
)

// fakeStore holds images by reference; an image in use cannot be removed
// while inUse is set.
type fakeStore struct {
	images  map[string]*image.Image
	inUse   bool
	removes int
}

func (f *fakeStore) Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error) {
	return nil, errdefs.ErrNotFound
}

func (f *fakeStore) PullForNamespace(ctx context.Context, ref string, auth *image.Auth, _ string) (*image.Image, error) {
	return f.Pull(ctx, ref, auth)
}

func (f *fakeStore) Status(ctx context.Context, ref string) (*image.Image, error) {
	if img, ok := f.images[ref]; ok {
		return img, nil
	}
	return nil, fmt.Errorf("image %s: %w", ref, errdefs.ErrNotFound)
}

func (f *fakeStore) List(ctx context.Context, filter string) ([]*image.Image, error) {
	var out []*image.Image
	for ref, img := range f.images {
		if filter == "" || filter == ref {
			out = append(out, img)
		}
	}
	return out, nil
}

func (f *fakeStore) Remove(ctx context.Context, ref string) error {
	f.removes++
	if f.inUse {
		return fmt.Errorf("image %s is in use: %w", ref, errdefs.ErrFailedPrecondition)
	}
	delete(f.images, ref)
	return nil
}

func (f *fakeStore) FsInfo(ctx context.Context) (image.FsUsage, error) { return image.FsUsage{}, nil }

func TestStorageRef(t *testing.T) {
	hex := strings.Repeat("a", 64)
	for in, want := range map[string]string{
		"sha256:" + hex:             hex,
		"sha256:abc":                "sha256:abc", // not an ID: a reference
		"nginx:1":                   "nginx:1",
		"docker.io/x@sha256:" + hex: "docker.io/x@sha256:" + hex,
	} {
		if got := StorageRef(in); got != want {
			t.Errorf("StorageRef(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ID(hex); got != "sha256:"+hex {
		t.Errorf("ID(%q) = %q", hex, got)
	}
}

// RemoveImage of an image in use waits for the background container
// removals once, then tries again; without removals to wait for, or when
// the wait fails, the first error stands.
func TestRemoveImageWaitsForRemovals(t *testing.T) {
	img := &image.Image{ID: strings.Repeat("2", 64)}
	req := &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "nginx:1"}}

	store := &fakeStore{images: map[string]*image.Image{"nginx:1": img}, inUse: true}
	waited := 0
	s := New(Options{Store: store, WaitRemovals: func(context.Context) error {
		waited++
		store.inUse = false // the last container holding it is gone
		return nil
	}})
	if _, err := s.RemoveImage(context.Background(), req); err != nil || waited != 1 || store.removes != 2 {
		t.Errorf("RemoveImage after waiting: %v, %d waits, %d removes; want nil, 1, 2", err, waited, store.removes)
	}

	store = &fakeStore{images: map[string]*image.Image{"nginx:1": img}, inUse: true}
	s = New(Options{Store: store, WaitRemovals: func(context.Context) error { return context.DeadlineExceeded }})
	if _, err := s.RemoveImage(context.Background(), req); !errors.Is(err, errdefs.ErrFailedPrecondition) || store.removes != 1 {
		t.Errorf("RemoveImage whose wait failed: %v, %d removes; want FailedPrecondition, 1", err, store.removes)
	}

	store = &fakeStore{images: map[string]*image.Image{"nginx:1": img}, inUse: true}
	if _, err := New(Options{Store: store}).RemoveImage(context.Background(), req); !errors.Is(err, errdefs.ErrFailedPrecondition) || store.removes != 1 {
		t.Errorf("RemoveImage without removals: %v, %d removes; want FailedPrecondition, 1", err, store.removes)
	}
	// Gone already: success.
	if _, err := New(Options{Store: &fakeStore{}}).RemoveImage(context.Background(), req); err != nil {
		t.Errorf("RemoveImage of an absent image: %v", err)
	}
}

func TestImageStatusCRIForm(t *testing.T) {
	uid := int64(1000)
	img := &image.Image{ID: strings.Repeat("3", 64), RepoTags: []string{"a:1"}, Size: 7, UID: &uid, Pinned: true}
	s := New(Options{Store: &fakeStore{images: map[string]*image.Image{img.ID: img}}})
	st, err := s.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ID(img.ID)}})
	if err != nil {
		t.Fatal(err)
	}
	got := st.GetImage()
	if got.GetId() != ID(img.ID) || got.GetSpec().GetImage() != ID(img.ID) || got.GetUid().GetValue() != 1000 || !got.GetPinned() || got.GetSize() != 7 {
		t.Errorf("ImageStatus = %v", got)
	}
	if st.Info != nil {
		t.Errorf("not verbose, yet info %v", st.Info)
	}
}
