package image

import (
	"fmt"
	"strings"

	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/sysregistriesv2"

	"github.com/podbay/podbay/internal/errdefs"
)

// normalize makes a pullable, fully qualified reference: "busybox" is
// docker.io/library/busybox:latest. A reference with both a tag and a digest
// keeps only the digest, which is what is pulled (containers/image refuses
// both; the digest is the stronger statement).
func normalize(named reference.Named) (reference.Named, error) {
	if digested, ok := named.(reference.Canonical); ok {
		if _, tagged := named.(reference.NamedTagged); tagged {
			return reference.WithDigest(reference.TrimNamed(named), digested.Digest())
		}
		return named, nil
	}
	return reference.TagNameOnly(named), nil
}

// pullCandidates returns the fully qualified references to try, in order,
// for the user's ref.
func (s *Store) pullCandidates(ref string) ([]reference.Named, error) {
	if ref == "" {
		return nil, fmt.Errorf("empty image reference: %w", errdefs.ErrInvalidArgument)
	}
	if isIDForm(ref) {
		return nil, fmt.Errorf("%q is an image ID, not a reference that can be pulled: %w", ref, errdefs.ErrInvalidArgument)
	}
	invalid := func(err error) error {
		return fmt.Errorf("parse image reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	if s.cfg.ShortNameMode == ShortNameDocker {
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			return nil, invalid(err)
		}
		if named, err = normalize(named); err != nil {
			return nil, invalid(err)
		}
		return []reference.Named{named}, nil
	}
	candidates, aliased, err := s.shortNameCandidates(ref, false)
	if err != nil {
		return nil, invalid(err)
	}
	if len(candidates) > 1 && !aliased && s.cfg.ShortNameMode == ShortNameEnforcing {
		return nil, fmt.Errorf("short name %q is ambiguous (%d unqualified-search registries, no alias) and short-name mode is enforcing: %w",
			ref, len(candidates), errdefs.ErrInvalidArgument)
	}
	return candidates, nil
}

// localCandidates returns the names under which ref may be stored. It
// returns nil (not an error) for a string that is no image reference,
// such as an ID prefix with a "sha256:" in front.
func (s *Store) localCandidates(ref string) []reference.Named {
	if isIDForm(ref) {
		return nil
	}
	if s.cfg.ShortNameMode == ShortNameDocker {
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			return nil
		}
		if named, err = normalize(named); err != nil {
			return nil
		}
		return []reference.Named{named}
	}
	candidates, _, err := s.shortNameCandidates(ref, true)
	if err != nil {
		return nil
	}
	return candidates
}

// shortNameCandidates resolves ref as registries.conf says
// (containers-registries.conf(5), "short-name aliasing"): a qualified name
// is itself; a short name is its alias if one is configured, else the name
// under each unqualified-search registry in order. local adds
// "localhost/<name>" after the alias, as podman's local lookup does.
// aliased reports that an alias decided.
func (s *Store) shortNameCandidates(ref string, local bool) (_ []reference.Named, aliased bool, _ error) {
	ref = stripTagIfDigested(ref)
	parsed, err := reference.Parse(ref)
	if err != nil {
		return nil, false, err
	}
	named, ok := parsed.(reference.Named)
	if !ok {
		return nil, false, fmt.Errorf("%q is not a named reference", ref)
	}
	if domain := reference.Domain(named); strings.ContainsAny(domain, ".:") || domain == "localhost" {
		full, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			return nil, false, err
		}
		full, err = normalize(full)
		return []reference.Named{full}, false, err
	}
	// Put the user's tag or digest on each candidate repository.
	suffix := func(repo reference.Named) (reference.Named, error) {
		if d, ok := named.(reference.Digested); ok {
			return reference.WithDigest(repo, d.Digest())
		}
		if t, ok := named.(reference.Tagged); ok {
			return reference.WithTag(repo, t.Tag())
		}
		return reference.TagNameOnly(repo), nil
	}
	sys := s.lookupContext()
	var out []reference.Named
	alias, _, err := sysregistriesv2.ResolveShortNameAlias(sys, named.Name())
	if err != nil {
		return nil, false, err
	}
	if alias != nil {
		c, err := suffix(alias)
		if err != nil {
			return nil, false, err
		}
		out = append(out, c)
		if !local {
			return out, true, nil
		}
	}
	registries := []string{}
	if local {
		registries = append(registries, "localhost")
	}
	search, _, err := sysregistriesv2.UnqualifiedSearchRegistriesWithOrigin(sys)
	if err != nil {
		return nil, false, err
	}
	registries = append(registries, search...)
	for _, reg := range registries {
		repo, err := reference.ParseNormalizedNamed(reg + "/" + named.Name())
		if err != nil {
			return nil, false, fmt.Errorf("unqualified-search registry %q: %w", reg, err)
		}
		c, err := suffix(repo)
		if err != nil {
			return nil, false, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, false, fmt.Errorf("short name %q matches no alias and registries.conf lists no unqualified-search registries", ref)
	}
	return out, alias != nil, nil
}

// repoCandidates returns the repositories a tag-less, digest-less ref
// names ("busybox" is docker.io/library/busybox), for List's filter; nil
// when ref carries a tag or digest or is no reference.
func (s *Store) repoCandidates(ref string) []string {
	parsed, err := reference.Parse(ref)
	if err != nil {
		return nil
	}
	if _, ok := parsed.(reference.Tagged); ok {
		return nil
	}
	if _, ok := parsed.(reference.Digested); ok {
		return nil
	}
	var repos []string
	for _, c := range s.localCandidates(ref) {
		repos = append(repos, c.Name())
	}
	return repos
}

// stripTagIfDigested drops the tag from "name:tag@digest": the digest is
// what is pulled.
func stripTagIfDigested(ref string) string {
	name, dgst, ok := strings.Cut(ref, "@")
	if !ok {
		return ref
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name + "@" + dgst
}

// isIDForm reports whether ref is "sha256:<hex>", an image ID or ID
// prefix, which reference parsing would take for an image named "sha256".
func isIDForm(ref string) bool {
	hex, ok := strings.CutPrefix(ref, "sha256:")
	return ok && isHex(hex)
}

// isFullID reports whether s is a 64-character lower-case hex image ID.
func isFullID(s string) bool {
	return len(s) == 64 && isHex(s)
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
