package image

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/storage"
)

// Image is a stored image as the CRI image service reports it.
type Image struct {
	// ID is the containers/storage image ID, the hex of the config digest.
	ID string
	// RepoTags are fully qualified "registry/repo:tag" names.
	RepoTags []string
	// RepoDigests are "registry/repo@sha256:..." for every repository the
	// image is known under and every manifest it was pulled through (a
	// multi-arch image has the index's digest first, then the platform
	// manifest's).
	RepoDigests []string
	// Size is the image's size on disk: its layers, uncompressed, and
	// metadata.
	Size uint64
	// UID is the numeric user of Config.User ("1000", "1000:1000"); nil
	// when the user is a name or unset.
	UID *int64
	// Username is the non-numeric user of Config.User ("www-data").
	Username string
	// Pinned images are exempt from kubelet's image garbage collection.
	Pinned bool
	Config ImageConfig
	// Annotations are the platform manifest's OCI annotations.
	Annotations map[string]string
}

// ImageConfig is the part of an image's configuration a container is made
// from.
type ImageConfig struct {
	Entrypoint   []string
	Cmd          []string
	Env          []string
	WorkingDir   string
	User         string
	Volumes      []string // sorted
	Labels       map[string]string
	StopSignal   string
	ExposedPorts []string // sorted, "80/tcp"
}

// imageInfo is what Image needs from the image's manifest and config. It is
// immutable for a given image ID and manifest, so it is cached.
type imageInfo struct {
	config      ImageConfig
	annotations map[string]string
	size        uint64
}

func infoKey(img *storage.Image) string {
	return img.ID + "@" + string(img.Digest)
}

// toImage builds an Image from a storage record.
func (s *Store) toImage(img *storage.Image) (*Image, error) {
	info, err := s.imageInfo(img)
	if err != nil {
		return nil, err
	}
	tags, digests := repoNames(img)
	out := &Image{
		ID:          img.ID,
		RepoTags:    tags,
		RepoDigests: digests,
		Size:        info.size,
		Config:      cloneConfig(info.config),
		Annotations: maps.Clone(info.annotations),
	}
	out.UID, out.Username = parseUser(info.config.User)
	pinned := s.pinnedRefs()
	for _, n := range img.Names {
		if pinned[n] {
			out.Pinned = true
		}
	}
	return out, nil
}

func (s *Store) imageInfo(img *storage.Image) (*imageInfo, error) {
	key := infoKey(img)
	s.mu.Lock()
	info, ok := s.info[key]
	s.mu.Unlock()
	if ok {
		return info, nil
	}
	info, err := s.readImageInfo(img.ID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.info[key] = info
	s.mu.Unlock()
	return info, nil
}

// forgetImage drops id's cached information.
func (s *Store) forgetImage(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.info {
		if strings.HasPrefix(key, id+"@") {
			delete(s.info, key)
		}
	}
}

func (s *Store) readImageInfo(id string) (*imageInfo, error) {
	info := &imageInfo{}
	size, err := s.store.ImageSize(id)
	if err != nil {
		return nil, fmt.Errorf("image %s size: %w", id, err)
	}
	if size > 0 {
		info.size = uint64(size)
	}
	raw, err := s.store.ImageBigData(id, storage.ImageDigestBigDataKey)
	if err != nil {
		return nil, fmt.Errorf("image %s manifest: %w", id, err)
	}
	mime := manifest.GuessMIMEType(raw)
	m, err := manifest.FromBlob(raw, mime)
	if err != nil {
		return nil, fmt.Errorf("image %s manifest: %w", id, err)
	}
	if mime == imgspecv1.MediaTypeImageManifest {
		var withAnnotations struct {
			Annotations map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal(raw, &withAnnotations); err == nil {
			info.annotations = withAnnotations.Annotations
		}
	}
	cfgDigest := m.ConfigInfo().Digest
	if cfgDigest == "" {
		// Schema 1 (long deprecated): no config blob; report an empty
		// configuration rather than failing every List.
		return info, nil
	}
	rawConfig, err := s.store.ImageBigData(id, cfgDigest.String())
	if err != nil {
		return nil, fmt.Errorf("image %s config: %w", id, err)
	}
	// Docker schema 2 and OCI configs share the fields read here.
	var cfg imgspecv1.Image
	if err := json.Unmarshal(rawConfig, &cfg); err != nil {
		return nil, fmt.Errorf("image %s config: %w", id, err)
	}
	c := cfg.Config
	info.config = ImageConfig{
		Entrypoint:   c.Entrypoint,
		Cmd:          c.Cmd,
		Env:          c.Env,
		WorkingDir:   c.WorkingDir,
		User:         c.User,
		Volumes:      slices.Sorted(maps.Keys(c.Volumes)),
		Labels:       c.Labels,
		StopSignal:   c.StopSignal,
		ExposedPorts: slices.Sorted(maps.Keys(c.ExposedPorts)),
	}
	return info, nil
}

// repoNames splits img's names into tags and digest references, and adds a
// repo@digest for each repository the image is named in and each manifest
// digest it holds, as CRI-O does: an image pulled by tag is also reachable
// by the digest of what was pulled.
func repoNames(img *storage.Image) (tags, digests []string) {
	var repos []string
	seen := map[string]bool{}
	add := func(list *[]string, s string) {
		if !seen[s] {
			seen[s] = true
			*list = append(*list, s)
		}
	}
	for _, n := range img.Names {
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		if _, ok := named.(reference.Canonical); ok {
			add(&digests, named.String())
		} else {
			add(&tags, named.String())
		}
		if !slices.Contains(repos, named.Name()) {
			repos = append(repos, named.Name())
		}
	}
	// img.Digest is the platform manifest's; any other manifest digest is
	// the list it was chosen from (or an older pull's), which is what the
	// user asked for, so those come first.
	var ordered []string
	for _, d := range img.Digests {
		if d != img.Digest {
			ordered = append(ordered, d.String())
		}
	}
	if img.Digest != "" {
		ordered = append(ordered, img.Digest.String())
	}
	for _, repo := range repos {
		for _, d := range ordered {
			add(&digests, repo+"@"+d)
		}
	}
	return tags, digests
}

// parseUser splits an image's User ("1000", "1000:1000", "www-data",
// "www-data:staff") into a numeric UID or a user name.
func parseUser(user string) (*int64, string) {
	name, _, _ := strings.Cut(user, ":")
	if name == "" {
		return nil, ""
	}
	if uid, err := strconv.ParseInt(name, 10, 64); err == nil {
		return &uid, ""
	}
	return nil, name
}

func cloneConfig(c ImageConfig) ImageConfig {
	c.Entrypoint = slices.Clone(c.Entrypoint)
	c.Cmd = slices.Clone(c.Cmd)
	c.Env = slices.Clone(c.Env)
	c.Volumes = slices.Clone(c.Volumes)
	c.Labels = maps.Clone(c.Labels)
	c.ExposedPorts = slices.Clone(c.ExposedPorts)
	return c
}
