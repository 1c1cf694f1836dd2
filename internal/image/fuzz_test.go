package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.podman.io/image/v5/docker/reference"

	"github.com/podbay/podbay/internal/errdefs"
)

// FuzzPullCandidates: the references PullImage resolves, in every
// short-name mode, are refused with ErrInvalidArgument (which PullImage
// answers as InvalidArgument) or give fully qualified, tagged or digested
// names that parse back to themselves; the local lookups ImageStatus,
// ListImages and RemoveImage make never panic.
func FuzzPullCandidates(f *testing.F) {
	dir := f.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(conf, []byte(searchConf), 0o644); err != nil {
		f.Fatal(err)
	}
	var stores []*Store
	for _, mode := range []string{ShortNameDocker, ShortNameDisabled, ShortNameEnforcing} {
		stores = append(stores, &Store{cfg: withDefaults(Config{
			ShortNameMode: mode, RegistriesConf: conf, RegistriesConfDir: filepath.Join(dir, "registries.conf.d"),
		})})
	}
	for _, ref := range []string{
		"busybox", "busybox:1.36", "docker.io/library/busybox:latest", "127.0.0.1:5000/test/busybox:latest",
		"registry.k8s.io/pause:3.10", "localhost/app", "tool:2", "busybox@" + someDigest,
		"busybox:1.36@" + someDigest, "sha256:" + someDigest[7:19], "Upper/case", "a b", "../../etc/passwd",
		"busybox@sha256:12", "busybox:" + string(make([]byte, 200)), "\xff\xfe", "example.com:99999/x",
		"[::1]:5000/x:y", "a//b", ":tag", "@sha256:", "x:-bad",
	} {
		f.Add(ref)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		for _, s := range stores {
			s.localCandidates(ref)
			s.repoCandidates(ref)
			cands, err := s.pullCandidates(ref)
			if err != nil {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("%s: pullCandidates(%q): %v, want ErrInvalidArgument", s.cfg.ShortNameMode, ref, err)
				}
				continue
			}
			if len(cands) == 0 {
				t.Fatalf("%s: pullCandidates(%q): no candidate and no error", s.cfg.ShortNameMode, ref)
			}
			for _, c := range cands {
				_, tagged := c.(reference.Tagged)
				_, digested := c.(reference.Digested)
				back, err := reference.ParseNormalizedNamed(c.String())
				if reference.Domain(c) == "" || !(tagged || digested) || err != nil || back.String() != c.String() {
					t.Fatalf("%s: pullCandidates(%q) gave %q (parses back to %v, %v)", s.cfg.ShortNameMode, ref, c, back, err)
				}
			}
		}
	})
}
