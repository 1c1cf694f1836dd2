package image

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"testing"

	"github.com/docker/distribution/registry/api/errcode"
	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker"
	"go.podman.io/storage"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestParseUser(t *testing.T) {
	uid := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		user     string
		uid      *int64
		username string
	}{
		{"", nil, ""},
		{"0", uid(0), ""},
		{"1000", uid(1000), ""},
		{"1000:1000", uid(1000), ""},
		{"www-data", nil, "www-data"},
		{"www-data:staff", nil, "www-data"},
		{"nobody:1000", nil, "nobody"},
		{":1000", nil, ""},
	} {
		gotUID, gotName := parseUser(tc.user)
		if (gotUID == nil) != (tc.uid == nil) || (gotUID != nil && *gotUID != *tc.uid) || gotName != tc.username {
			t.Errorf("parseUser(%q) = %v, %q", tc.user, gotUID, gotName)
		}
	}
}

func TestRepoNames(t *testing.T) {
	index := digest.Digest("sha256:" + fmt.Sprintf("%064x", 1))
	platform := digest.Digest("sha256:" + fmt.Sprintf("%064x", 2))
	img := &storage.Image{
		Names: []string{
			"docker.io/library/busybox:latest",
			"docker.io/library/busybox:1.36",
			"quay.io/x/busybox@" + platform.String(),
		},
		Digest:  platform,
		Digests: []digest.Digest{platform, index},
	}
	tags, digests := repoNames(img)
	if want := []string{"docker.io/library/busybox:latest", "docker.io/library/busybox:1.36"}; !slices.Equal(tags, want) {
		t.Errorf("tags = %v, want %v", tags, want)
	}
	want := []string{
		"quay.io/x/busybox@" + platform.String(),
		"docker.io/library/busybox@" + index.String(),
		"docker.io/library/busybox@" + platform.String(),
		"quay.io/x/busybox@" + index.String(),
	}
	if !slices.Equal(digests, want) {
		t.Errorf("digests = %v, want %v", digests, want)
	}
	if tags, digests := repoNames(&storage.Image{}); tags != nil || digests != nil {
		t.Errorf("nameless image: %v, %v", tags, digests)
	}
}

func TestClassifyPullError(t *testing.T) {
	code := func(s string) errcode.ErrorCode { return errcode.ParseErrorCode(s) }
	for _, tc := range []struct {
		err  error
		want error // nil: unclassified
	}{
		{docker.ErrUnauthorizedForCredentials{Err: errors.New("x")}, ErrUnauthorized},
		{fmt.Errorf("reading manifest: %w", code("UNAUTHORIZED")), ErrUnauthorized},
		{code("DENIED").WithMessage("no access"), ErrUnauthorized},
		{docker.UnexpectedHTTPStatusError{StatusCode: 403}, ErrUnauthorized},
		{fmt.Errorf("reading manifest: %w", code("MANIFEST_UNKNOWN")), errdefs.ErrNotFound},
		{code("NAME_UNKNOWN").WithMessage("repository name not known"), errdefs.ErrNotFound},
		{errcode.Errors{code("MANIFEST_UNKNOWN")}, errdefs.ErrNotFound},
		{docker.UnexpectedHTTPStatusError{StatusCode: 404}, errdefs.ErrNotFound},
		{docker.UnexpectedHTTPStatusError{StatusCode: 503}, errdefs.ErrUnavailable},
		{docker.ErrTooManyRequests, errdefs.ErrUnavailable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, errdefs.ErrUnavailable},
		{&net.DNSError{Err: "no such host", Name: "registry.invalid"}, errdefs.ErrUnavailable},
		{fmt.Errorf("pinging: %w", os.NewSyscallError("connect", syscall.ECONNRESET)), errdefs.ErrUnavailable},
		{errors.New("initializing source docker://x:latest: registry docker.io is blocked in /etc/containers/registries.conf or /etc/containers/registries.conf.d"),
			errdefs.ErrFailedPrecondition},
		{errors.New("initializing source docker://x:latest: exceeded maximum allowed size of 4194304 bytes"), errdefs.ErrInvalidArgument},
		{errors.New("parsing image configuration: exceeded maximum allowed size of 4194304 bytes"), errdefs.ErrInvalidArgument},
		{context.DeadlineExceeded, context.DeadlineExceeded},
		{errors.New("something else"), nil},
	} {
		got := classifyPullError("example.com/a:1", tc.err)
		if reflect.TypeOf(tc.err).Comparable() && !errors.Is(got, tc.err) {
			t.Errorf("classify(%v) lost the cause: %v", tc.err, got)
		}
		for _, class := range []error{ErrUnauthorized, errdefs.ErrNotFound, errdefs.ErrUnavailable, errdefs.ErrInvalidArgument, errdefs.ErrFailedPrecondition} {
			if class != tc.want && errors.Is(got, class) {
				t.Errorf("classify(%v) = %v: also %v", tc.err, got, class)
			}
		}
		if tc.want != nil && !errors.Is(got, tc.want) {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestPickPullError(t *testing.T) {
	notFound := fmt.Errorf("a: %w", errdefs.ErrNotFound)
	down := fmt.Errorf("b: %w", errdefs.ErrUnavailable)
	got := pickPullError([]error{notFound, down})
	if !errors.Is(got, errdefs.ErrUnavailable) || errors.Is(got, errdefs.ErrNotFound) {
		t.Errorf("pickPullError = %v", got)
	}
	got = pickPullError([]error{notFound, notFound})
	if !errors.Is(got, errdefs.ErrNotFound) {
		t.Errorf("pickPullError = %v", got)
	}
}

func TestAuth(t *testing.T) {
	enc := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		auth       Auth
		user, pass string
		none       bool
		invalid    bool
	}{
		{auth: Auth{Username: "u", Password: "p"}, user: "u", pass: "p"},
		{auth: Auth{Auth: enc([]byte("u:p:q"))}, user: "u", pass: "p:q"},
		{auth: Auth{Username: "u", Password: "p", Auth: enc([]byte("x:y"))}, user: "u", pass: "p"},
		{auth: Auth{IdentityToken: "tok"}},
		{auth: Auth{}, none: true},
		{auth: Auth{RegistryToken: "bearer"}, none: true},
		{auth: Auth{Auth: "!!!"}, invalid: true},
		{auth: Auth{Auth: enc([]byte("nocolon"))}, invalid: true},
	} {
		got, err := tc.auth.dockerAuth()
		switch {
		case tc.invalid:
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%+v: %v, want ErrInvalidArgument", tc.auth, err)
			}
		case err != nil:
			t.Errorf("%+v: %v", tc.auth, err)
		case tc.none:
			if got != nil {
				t.Errorf("%+v: %+v, want none", tc.auth, got)
			}
		case got == nil || got.Username != tc.user || got.Password != tc.pass || got.IdentityToken != tc.auth.IdentityToken:
			t.Errorf("%+v: %+v", tc.auth, got)
		}
	}
	a, b := &Auth{Username: "u", Password: "p"}, &Auth{Username: "u", Password: "q"}
	if a.key() == b.key() || (*Auth)(nil).key() != "" {
		t.Error("credentials do not separate pulls")
	}
}

// The imported layer is the same for the same files (so the pause image's
// ID is stable across restarts) and has parents before children.
func TestWriteLayerDeterministic(t *testing.T) {
	src := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(src, []byte("binary"), 0o700); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{Path: "/usr/bin/pause", Source: src, Mode: 0o755},
		{Path: "/etc-x", Source: src, Mode: 0o644},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	var digests []digest.Digest
	for range 2 {
		blobs := t.TempDir()
		d, err := writeLayer(blobs, files)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.Digest)
		f, err := os.Open(filepath.Join(blobs, d.Digest.Encoded()))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		tr := tar.NewReader(f)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s %o %d", hdr.Name, hdr.Mode, hdr.ModTime.Unix()))
		}
		f.Close()
		want := []string{"etc-x 644 0", "tmp/ 1777 0", "usr/ 755 0", "usr/bin/ 755 0", "usr/bin/pause 755 0"}
		if !slices.Equal(got, want) {
			t.Errorf("layer entries = %q, want %q", got, want)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("same files, different layers: %v", digests)
	}
}
