package image

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

var someDigest = "sha256:" + strings.Repeat("ab", 32)

// refStore is a Store with no storage, enough for reference resolution.
func refStore(t *testing.T, mode, registriesConf string) *Store {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(path, []byte(registriesConf), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Store{cfg: withDefaults(Config{
		ShortNameMode:     mode,
		RegistriesConf:    path,
		RegistriesConfDir: filepath.Join(dir, "registries.conf.d"),
	})}
}

func names(t *testing.T, s *Store, ref string) ([]string, error) {
	t.Helper()
	cands, err := s.pullCandidates(ref)
	var out []string
	for _, c := range cands {
		out = append(out, c.String())
	}
	return out, err
}

func TestPullCandidatesDockerMode(t *testing.T) {
	s := refStore(t, "", "")
	for _, tc := range []struct {
		ref  string
		want string // empty: ErrInvalidArgument
	}{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"library/busybox", "docker.io/library/busybox:latest"},
		{"docker.io/busybox", "docker.io/library/busybox:latest"},
		{"user/app:v1", "docker.io/user/app:v1"},
		{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"},
		{"127.0.0.1:5000/x/y", "127.0.0.1:5000/x/y:latest"},
		{"localhost/app", "localhost/app:latest"},
		{"busybox@" + someDigest, "docker.io/library/busybox@" + someDigest},
		{"busybox:1.36@" + someDigest, "docker.io/library/busybox@" + someDigest},
		{"", ""},
		{"Upper/case", ""},
		{"a b", ""},
		{"busybox@sha256:12", ""},
		{strings.Repeat("ab", 32), ""},
		{"sha256:" + strings.Repeat("ab", 32), ""},
	} {
		got, err := names(t, s, tc.ref)
		if tc.want == "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("pullCandidates(%q) = %v, %v; want ErrInvalidArgument", tc.ref, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, []string{tc.want}) {
			t.Errorf("pullCandidates(%q) = %v, %v; want %s", tc.ref, got, err, tc.want)
		}
	}
}

const searchConf = `
unqualified-search-registries = ["quay.io", "docker.io"]
[aliases]
"tool" = "example.com/tools/tool"
`

func TestPullCandidatesRegistriesConf(t *testing.T) {
	for _, tc := range []struct {
		mode, ref string
		want      []string // nil: ErrInvalidArgument
	}{
		{ShortNameDisabled, "foo", []string{"quay.io/foo:latest", "docker.io/library/foo:latest"}},
		{ShortNamePermissive, "foo:2", []string{"quay.io/foo:2", "docker.io/library/foo:2"}},
		{ShortNameDisabled, "foo@" + someDigest, []string{"quay.io/foo@" + someDigest, "docker.io/library/foo@" + someDigest}},
		{ShortNameDisabled, "tool:2", []string{"example.com/tools/tool:2"}},
		{ShortNameEnforcing, "tool", []string{"example.com/tools/tool:latest"}},
		{ShortNameEnforcing, "foo", nil},
		{ShortNameEnforcing, "quay.io/a/b", []string{"quay.io/a/b:latest"}},
		{ShortNameDisabled, "localhost/x", []string{"localhost/x:latest"}},
		{ShortNameDisabled, "Bad", nil},
	} {
		s := refStore(t, tc.mode, searchConf)
		got, err := names(t, s, tc.ref)
		if tc.want == nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: pullCandidates(%q) = %v, %v; want ErrInvalidArgument", tc.mode, tc.ref, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: pullCandidates(%q) = %v, %v; want %v", tc.mode, tc.ref, got, err, tc.want)
		}
	}
}

func TestLocalCandidates(t *testing.T) {
	s := refStore(t, ShortNameDisabled, searchConf)
	var got []string
	for _, c := range s.localCandidates("foo") {
		got = append(got, c.String())
	}
	want := []string{"localhost/foo:latest", "quay.io/foo:latest", "docker.io/library/foo:latest"}
	if !slices.Equal(got, want) {
		t.Errorf("localCandidates(foo) = %v, want %v", got, want)
	}
	if c := s.localCandidates("sha256:" + strings.Repeat("a", 12)); len(c) != 0 {
		t.Errorf("an ID prefix gave names: %v", c)
	}
	if repos := refStore(t, "", "").repoCandidates("busybox"); !slices.Equal(repos, []string{"docker.io/library/busybox"}) {
		t.Errorf("repoCandidates(busybox) = %v", repos)
	}
	if repos := refStore(t, "", "").repoCandidates("busybox:1"); repos != nil {
		t.Errorf("repoCandidates(busybox:1) = %v, want none", repos)
	}
}

func TestStripTagIfDigested(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                       "busybox",
		"busybox:1":                     "busybox:1",
		"busybox:1@" + someDigest:       "busybox@" + someDigest,
		"host:5000/a/b@" + someDigest:   "host:5000/a/b@" + someDigest,
		"host:5000/a/b:t@" + someDigest: "host:5000/a/b@" + someDigest,
	} {
		if got := stripTagIfDigested(in); got != want {
			t.Errorf("stripTagIfDigested(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewRejectsUnknownShortNameMode(t *testing.T) {
	_, err := New(t.Context(), Config{ShortNameMode: "prompt", StorageRoot: t.TempDir(), RunRoot: t.TempDir()})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New = %v, want ErrInvalidArgument", err)
	}
}
