package image

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/storage"

	"github.com/podbay/podbay/internal/errdefs"
)

// matchKind says how a reference found its image, which decides what
// Remove takes away.
type matchKind int

const (
	// matchID: the full ID or a unique prefix of it.
	matchID matchKind = iota
	// matchName: one of the image's names, a tag or a repo@digest.
	matchName
	// matchDigest: a repo@digest whose digest is one of the image's
	// manifests (the image was pulled by tag, or through another list).
	matchDigest
)

type match struct {
	img  *storage.Image
	kind matchKind
	name string // the matched name, for matchName
}

// minIDPrefix is the shortest ID prefix accepted, so that a short word is
// not taken for an ID.
const minIDPrefix = 3

// resolve finds the image ref names: a full ID (with or without
// "sha256:"), a tag or digest reference, or a unique ID prefix, in that
// order, as containerd's and CRI-O's lookups do.
func (s *Store) resolve(ref string) (*match, error) {
	if ref == "" {
		return nil, fmt.Errorf("empty image reference: %w", errdefs.ErrInvalidArgument)
	}
	id := strings.TrimPrefix(ref, "sha256:")
	if isFullID(id) {
		img, err := s.store.Image(id)
		if err == nil && img.ID == id {
			return &match{img: img, kind: matchID}, nil
		}
		if err != nil && !errors.Is(err, storage.ErrImageUnknown) {
			return nil, fmt.Errorf("look up image %s: %w", id, err)
		}
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	for _, named := range s.localCandidates(ref) {
		m, err := s.findByName(named)
		if err != nil || m != nil {
			return m, err
		}
	}
	if len(id) >= minIDPrefix && isHex(id) {
		return s.findByIDPrefix(ref, id)
	}
	return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

// findByName finds the image carrying named as a name or, for a digest
// reference, the image of named's repository that holds that manifest; nil
// when there is none. It uses c/storage's name and digest indexes, not a
// scan: kubelet asks for an image's status before every container start.
func (s *Store) findByName(named reference.Named) (*match, error) {
	want := named.String()
	// c/storage's Image also matches ID prefixes: accept only a name hit.
	img, err := s.store.Image(want)
	switch {
	case err == nil && slices.Contains(img.Names, want):
		return &match{img: img, kind: matchName, name: want}, nil
	case err != nil && !errors.Is(err, storage.ErrImageUnknown):
		return nil, fmt.Errorf("look up image %s: %w", want, err)
	}
	digested, ok := named.(reference.Canonical)
	if !ok {
		return nil, nil
	}
	images, err := s.store.ImagesByDigest(digested.Digest())
	if err != nil && !errors.Is(err, storage.ErrImageUnknown) {
		return nil, fmt.Errorf("look up digest %s: %w", digested.Digest(), err)
	}
	for _, img := range images {
		for _, n := range img.Names {
			if other, err := reference.ParseNormalizedNamed(n); err == nil && other.Name() == named.Name() {
				return &match{img: img, kind: matchDigest}, nil
			}
		}
	}
	return nil, nil
}

// findByIDPrefix finds the one image whose ID starts with prefix.
func (s *Store) findByIDPrefix(ref, prefix string) (*match, error) {
	images, err := s.store.Images()
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var found *storage.Image
	for i := range images {
		if strings.HasPrefix(images[i].ID, prefix) {
			if found != nil {
				return nil, fmt.Errorf("image ID prefix %q is ambiguous: %w", ref, errdefs.ErrInvalidArgument)
			}
			found = &images[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return &match{img: found, kind: matchID}, nil
}

// Status finds an image by ID, unique ID prefix, tag ("busybox" is
// docker.io/library/busybox:latest) or digest reference.
func (s *Store) Status(ctx context.Context, ref string) (*Image, error) {
	m, err := s.resolve(ref)
	if err != nil {
		return nil, err
	}
	return s.toImage(m.img)
}

// List returns all images, or those filter names. A filter without tag or
// digest ("busybox") matches every tag of that repository; otherwise the
// filter is resolved as Status does. A filter that matches nothing gives an
// empty list.
func (s *Store) List(ctx context.Context, filter string) ([]*Image, error) {
	images, err := s.store.Images()
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var selected []*storage.Image
	switch {
	case filter == "":
		for i := range images {
			selected = append(selected, &images[i])
		}
	default:
		repos := s.repoCandidates(filter)
		for i := range images {
			if inRepos(&images[i], repos) {
				selected = append(selected, &images[i])
			}
		}
		if len(selected) == 0 {
			m, err := s.resolve(filter)
			switch {
			case errdefs.IsNotFound(err), errors.Is(err, errdefs.ErrInvalidArgument):
				return []*Image{}, nil
			case err != nil:
				return nil, err
			}
			selected = append(selected, m.img)
		}
	}
	out := make([]*Image, 0, len(selected))
	for _, img := range selected {
		converted, err := s.toImage(img)
		if errors.Is(err, storage.ErrImageUnknown) {
			continue // removed while we listed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, converted)
	}
	return out, nil
}

func inRepos(img *storage.Image, repos []string) bool {
	if len(repos) == 0 {
		return false
	}
	for _, n := range img.Names {
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		for _, r := range repos {
			if named.Name() == r {
				return true
			}
		}
	}
	return false
}
