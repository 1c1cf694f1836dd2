package image

import (
	"fmt"

	"go.podman.io/image/v5/docker/reference"

	"github.com/podbay/podbay/internal/errdefs"
)

// registryPaths are the registries.conf file and drop-in directory pulls
// and short-name lookups read; empty means containers/image's default.
type registryPaths struct {
	conf, dir string
}

// Registries are the configuration files a pull reads, as Config names
// them: RegistriesConf, RegistriesConfDir, PolicyPath and PolicyDir.
type Registries struct {
	Conf      string
	ConfDir   string
	Policy    string
	PolicyDir string
}

// SetRegistries makes the pulls and lookups that start from now on read
// these files (a reload of podbayd's configuration); pulls under way
// finish with the ones they started with. The files' contents are read
// afresh by every pull anyway.
func (s *Store) SetRegistries(r Registries) {
	s.paths.Store(&registryPaths{conf: r.Conf, dir: r.ConfDir})
	s.policy.setPath(r.Policy)
	s.policy.setDir(r.PolicyDir)
}

// SetPinned replaces the references whose images are reported Pinned.
func (s *Store) SetPinned(refs []string) error {
	pinned, err := pinnedSet(refs)
	if err != nil {
		return err
	}
	s.pinned.Store(&pinned)
	return nil
}

// registryPaths returns the registries.conf paths in effect: those
// SetRegistries gave, else the Config's.
func (s *Store) registryPaths() registryPaths {
	if p := s.paths.Load(); p != nil {
		return *p
	}
	return registryPaths{conf: s.cfg.RegistriesConf, dir: s.cfg.RegistriesConfDir}
}

// pinnedRefs returns the pinned names (nil before New sets them).
func (s *Store) pinnedRefs() map[string]bool {
	if p := s.pinned.Load(); p != nil {
		return *p
	}
	return nil
}

// pinnedSet normalizes references ("pause:3.10" is
// docker.io/library/pause:3.10) into the names images are stored under.
func pinnedSet(refs []string) (map[string]bool, error) {
	pinned := make(map[string]bool, len(refs))
	for _, ref := range refs {
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			return nil, fmt.Errorf("pinned image %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
		}
		pinned[reference.TagNameOnly(named).String()] = true
	}
	return pinned, nil
}
