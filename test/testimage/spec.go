package testimage

import (
	"fmt"
	"go.podman.io/image/v5/docker/reference"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Base is what an image's first layer holds.
type Base int

const (
	// BaseBusybox is the BusyboxLayer: busybox, one hard link per applet,
	// and the /etc accounts. The zero value.
	BaseBusybox Base = iota
	// BaseBusyboxBinary is a layer holding /bin/busybox alone.
	BaseBusyboxBinary
	// BaseScratch is no base layer: the image holds its Files only.
	BaseScratch
)

func (b Base) String() string {
	switch b {
	case BaseBusybox:
		return "busybox"
	case BaseBusyboxBinary:
		return "busybox-binary"
	case BaseScratch:
		return "scratch"
	}
	return fmt.Sprintf("Base(%d)", int(b))
}

// Format is the media-type family of an image's manifests, config and
// layers.
type Format int

const (
	// OCI uses the OCI image manifest, config, layer and index media types.
	// The zero value.
	OCI Format = iota
	// DockerV2 uses Docker's image manifest v2 schema 2 and manifest list.
	DockerV2
)

func (f Format) String() string {
	switch f {
	case OCI:
		return "oci"
	case DockerV2:
		return "docker-v2"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Config is the runtime configuration of an image, as in a Dockerfile. It is
// written to the image as given: no field has a default (Env gets no PATH
// unless it lists one; see DefaultPath).
type Config struct {
	User       string            // "1000", "1000:1000", "www-data", "www-data:www-data"
	Env        []string          // "KEY=value"
	WorkingDir string            // absolute path
	Entrypoint []string          // exec form
	Cmd        []string          // exec form
	Volumes    []string          // absolute paths
	Labels     map[string]string // image labels
	// ExposedPorts are "port/protocol", such as "8080/tcp".
	ExposedPorts []string
	// StopSignal is a signal name ("SIGUSR1") or number ("10").
	StopSignal string
}

// Spec describes one image and the tags it is served under.
type Spec struct {
	// Repository is the image's name within the registry, without the
	// registry's address: "test/busybox". Lower case, and at least two
	// characters (go-containerregistry's rule).
	Repository string
	// Tags all name the same image (or index). With none, the image is
	// pushed by digest only.
	Tags []string
	// Base selects the first layer. The zero value is BaseBusybox.
	Base Base
	// Files make a second layer on top of the base, in the order the
	// layer's tar lists them (directories first). A parent directory that
	// neither Files nor the base layer has is added root-owned and 0755.
	// No Files, no second layer.
	Files []File
	// RawLayers are uncompressed tar archives, each appended verbatim as
	// one more layer after the Files layer. Nothing in them is checked:
	// they carry what Files refuses to build (paths leaving the root,
	// links pointing out of it, whiteouts), for tests of how a runtime
	// unpacks a hostile layer.
	RawLayers [][]byte
	// CompressedLayers are gzip-compressed tar archives, each appended
	// as given after the RawLayers, its compressed form served as is
	// (podbay-testimages --image: large layers built once and cached).
	CompressedLayers [][]byte
	// Config is the image's runtime configuration.
	Config Config
	// Platforms are "os/arch[/variant]", such as "linux/arm/v7". None means
	// this host's ("linux/" + runtime.GOARCH). One gives a plain image for
	// that platform; more than one give an image index with one image per
	// platform. The base layer of a platform the host busybox cannot run on
	// is a stand-in without binaries: a valid image that does not run.
	Platforms []string
	// Format selects the media types. The zero value is OCI.
	Format Format
}

// References returns the references the spec is served under from the
// registry at addr ("127.0.0.1:5000"): one "addr/repository:tag" per tag,
// in order.
func (s Spec) References(addr string) []string {
	out := make([]string, 0, len(s.Tags))
	for _, tag := range s.Tags {
		out = append(out, addr+"/"+s.Repository+":"+tag)
	}
	return out
}

// validRegistry stands in for a registry address when checking names.
const validRegistry = "testimage.invalid"

// validate reports the first thing wrong with the spec that is not about
// file content (that shows when the layer is built).
func (s Spec) validate() error {
	if s.Repository == "" {
		return fmt.Errorf("empty repository")
	}
	repo, err := name.NewRepository(validRegistry+"/"+s.Repository, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("repository %q: %w", s.Repository, err)
	}
	// go-containerregistry v0.22 no longer checks path components
	// ("test//a", "test/-a"); the distribution grammar, which podbayd
	// parses with, does.
	if _, err := reference.ParseNamed(validRegistry + "/" + s.Repository); err != nil {
		return fmt.Errorf("repository %q: %w", s.Repository, err)
	}
	seen := map[string]bool{}
	for _, tag := range s.Tags {
		if _, err := name.NewTag(repo.String()+":"+tag, name.StrictValidation); err != nil || tag == "" {
			return fmt.Errorf("tag %q: invalid", tag)
		}
		if seen[tag] {
			return fmt.Errorf("tag %q listed twice", tag)
		}
		seen[tag] = true
	}
	switch s.Base {
	case BaseBusybox, BaseBusyboxBinary, BaseScratch:
	default:
		return fmt.Errorf("unknown base %v", s.Base)
	}
	switch s.Format {
	case OCI, DockerV2:
	default:
		return fmt.Errorf("unknown format %v", s.Format)
	}
	if _, err := s.platforms(); err != nil {
		return err
	}
	return nil
}

// platforms parses Platforms, or returns the host's.
func (s Spec) platforms() ([]v1.Platform, error) {
	if len(s.Platforms) == 0 {
		return []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}, nil
	}
	out := make([]v1.Platform, 0, len(s.Platforms))
	seen := map[string]bool{}
	for _, str := range s.Platforms {
		p, err := v1.ParsePlatform(str)
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", str, err)
		}
		if p.OS == "" || p.Architecture == "" || p.OSVersion != "" || strings.Contains(str, " ") {
			return nil, fmt.Errorf("platform %q: want os/arch[/variant]", str)
		}
		key := platformString(*p)
		if seen[key] {
			return nil, fmt.Errorf("platform %q listed twice", str)
		}
		seen[key] = true
		out = append(out, *p)
	}
	return out, nil
}

// platformString formats p as os/arch[/variant].
func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// imageConfig converts c to go-containerregistry's form.
func (c Config) imageConfig() v1.Config {
	out := v1.Config{
		User:       c.User,
		Env:        c.Env,
		WorkingDir: c.WorkingDir,
		Entrypoint: c.Entrypoint,
		Cmd:        c.Cmd,
		Labels:     c.Labels,
		StopSignal: c.StopSignal,
	}
	if len(c.Volumes) > 0 {
		out.Volumes = map[string]struct{}{}
		for _, v := range c.Volumes {
			out.Volumes[v] = struct{}{}
		}
	}
	if len(c.ExposedPorts) > 0 {
		out.ExposedPorts = map[string]struct{}{}
		for _, p := range c.ExposedPorts {
			out.ExposedPorts[p] = struct{}{}
		}
	}
	return out
}
