package checkpoint

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// stage makes a directory laid out as a checkpoint before it is archived.
func stage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, CheckpointDirectory), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, CheckpointDirectory, "pages-1.img"), bytes.Repeat([]byte{7}, 5000), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, SpecDumpFile), []byte(`{"ociVersion":"1.0.2"}`), 0o600))
	must(t, WriteJSON(filepath.Join(dir, ConfigDumpFile), ContainerConfig{
		ID: "abc", Name: "k8s_c", RootfsImageRef: "busybox", CreatedTime: time.Unix(100, 0).UTC(),
	}))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, location string) []string {
	t.Helper()
	tr, c, err := Open(location)
	must(t, err)
	defer c.Close()
	var out []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(t, err)
		out = append(out, hdr.Name)
	}
	sort.Strings(out)
	return out
}

func TestArchiveRoundTrip(t *testing.T) {
	for _, name := range []string{"cp.tar", "cp.tar.gz"} {
		t.Run(name, func(t *testing.T) {
			src := stage(t)
			loc := filepath.Join(t.TempDir(), name)
			must(t, Write(loc, src))
			raw, err := os.ReadFile(loc)
			must(t, err)
			if gz := raw[0] == 0x1f && raw[1] == 0x8b; gz != Compressed(loc) {
				t.Fatalf("gzip = %v for %s", gz, name)
			}
			got := names(t, loc)
			want := []string{"checkpoint/", "checkpoint/pages-1.img", "config.dump", "spec.dump"}
			if len(got) != len(want) {
				t.Fatalf("entries = %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("entries = %v, want %v", got, want)
				}
			}
			out := t.TempDir()
			cfg, err := Extract(loc, out)
			must(t, err)
			if cfg.ID != "abc" || cfg.RootfsImageRef != "busybox" || !cfg.CreatedTime.Equal(time.Unix(100, 0)) {
				t.Fatalf("config = %+v", cfg)
			}
			b, err := os.ReadFile(filepath.Join(out, CheckpointDirectory, "pages-1.img"))
			must(t, err)
			if len(b) != 5000 || b[4999] != 7 {
				t.Fatalf("pages-1.img: %d bytes", len(b))
			}
			if !IsArchive(loc) || IsArchive("busybox:latest") || IsArchive(out) {
				t.Fatal("IsArchive")
			}
		})
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	loc := filepath.Join(dir, "cp.tar")
	// An unreadable source: the walk fails half way.
	err := Write(loc, filepath.Join(dir, "missing"))
	if err == nil {
		t.Fatal("Write of a missing dir succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
	// An existing archive survives a failed overwrite.
	must(t, os.WriteFile(loc, []byte("old"), 0o600))
	if Write(loc, filepath.Join(dir, "missing")) == nil {
		t.Fatal("Write succeeded")
	}
	if b, _ := os.ReadFile(loc); string(b) != "old" {
		t.Fatalf("existing archive = %q", b)
	}
	for _, bad := range []string{"relative.tar", "/nonexistent-dir-podbay/cp.tar", dir} {
		if err := Write(bad, stage(t)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Write(%q) = %v, want invalid argument", bad, err)
		}
	}
}

func writeTar(t *testing.T, path string, entries map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, name := range keys {
		must(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(entries[name])), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(entries[name]))
		must(t, err)
	}
	must(t, tw.Close())
	must(t, os.WriteFile(path, buf.Bytes(), 0o600))
}

func TestExtractRejects(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]map[string]string{
		"escape":   {"../evil": "x", "spec.dump": "{}", "config.dump": "{}", "checkpoint/a": ""},
		"no-spec":  {"config.dump": "{}", "checkpoint/a": ""},
		"no-cp":    {"config.dump": "{}", "spec.dump": "{}"},
		"bad-json": {"config.dump": "{", "spec.dump": "{}", "checkpoint/a": ""},
	}
	for name, entries := range cases {
		p := filepath.Join(dir, name+".tar")
		writeTar(t, p, entries)
		out := t.TempDir()
		if _, err := Extract(p, out); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Extract = %v, want invalid argument", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "evil")); err == nil {
		t.Fatal("an entry left the directory")
	}
	p := filepath.Join(dir, "garbage.tar")
	must(t, os.WriteFile(p, bytes.Repeat([]byte("not a tar "), 100), 0o600))
	if _, err := Extract(p, t.TempDir()); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("garbage: Extract = %v", err)
	}
}

func TestRootfsDiffRoundTrip(t *testing.T) {
	rootfs := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(rootfs, "data/sub"), 0o750))
	must(t, os.WriteFile(filepath.Join(rootfs, "data/sub/count"), []byte("42"), 0o640))
	must(t, os.WriteFile(filepath.Join(rootfs, "etc-motd"), []byte("changed"), 0o644))
	must(t, os.Symlink("data/sub/count", filepath.Join(rootfs, "link")))
	changes := []Change{
		{Path: "/data", Kind: Added}, {Path: "/data/sub", Kind: Added}, {Path: "/data/sub/count", Kind: Added},
		{Path: "/etc-motd", Kind: Modified}, {Path: "/link", Kind: Added},
		{Path: "/bin/gone", Kind: Deleted}, {Path: "/vanished", Kind: Added},
	}
	stageDir := t.TempDir()
	must(t, WriteRootfsDiff(stageDir, rootfs, changes))

	target := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(target, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(target, "bin/gone"), []byte("x"), 0o755))
	must(t, os.WriteFile(filepath.Join(target, "etc-motd"), []byte("image"), 0o644))
	must(t, ApplyRootfsDiff(stageDir, target))

	if b, err := os.ReadFile(filepath.Join(target, "data/sub/count")); err != nil || string(b) != "42" {
		t.Fatalf("count = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(target, "data/sub/count")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("count mode: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(target, "data")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("data mode: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "etc-motd")); string(b) != "changed" {
		t.Fatalf("etc-motd = %q", b)
	}
	if l, err := os.Readlink(filepath.Join(target, "link")); err != nil || l != "data/sub/count" {
		t.Fatalf("link = %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(target, "bin/gone")); err == nil {
		t.Fatal("deleted file still there")
	}
	// No changes: no deleted.files, an empty diff; applying it is a no-op.
	empty := t.TempDir()
	must(t, WriteRootfsDiff(empty, rootfs, nil))
	if _, err := os.Stat(filepath.Join(empty, DeletedFilesFile)); err == nil {
		t.Fatal("deleted.files written without deletions")
	}
	must(t, ApplyRootfsDiff(empty, target))
	must(t, ApplyRootfsDiff(t.TempDir(), target))
}

func TestApplyRootfsDiffRefusesEscapes(t *testing.T) {
	target := t.TempDir()
	outside := t.TempDir()
	must(t, os.Symlink(outside, filepath.Join(target, "out")))
	for name, entries := range map[string]map[string]string{
		"dotdot":  {"../x": "evil"},
		"symlink": {"out/x": "evil"},
	} {
		dir := t.TempDir()
		writeTar(t, filepath.Join(dir, RootFsDiffTar), entries)
		if err := ApplyRootfsDiff(dir, target); err == nil {
			t.Errorf("%s: applied", name)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("wrote outside the root: %v", ents)
	}
	dir := t.TempDir()
	must(t, WriteJSON(filepath.Join(dir, DeletedFilesFile), []string{"/../../etc"}))
	if err := ApplyRootfsDiff(dir, target); err == nil {
		t.Fatal("deleted.files with .. applied")
	}
}

// A rootfs diff may not reach the host through a symlink the container's
// root filesystem holds (an image can ship "out -> /"): neither a hard
// link whose source lies behind it nor a deletion below it.
func TestApplyRootfsDiffRefusesSymlinkedParents(t *testing.T) {
	target := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("host"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(target, "out")))

	dir := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: "stolen", Typeflag: tar.TypeLink, Linkname: "out/secret", Mode: 0o644}))
	must(t, tw.Close())
	must(t, os.WriteFile(filepath.Join(dir, RootFsDiffTar), buf.Bytes(), 0o600))
	if err := ApplyRootfsDiff(dir, target); err == nil {
		t.Error("a hard link to a file behind a symlink was applied")
	}
	if _, err := os.Lstat(filepath.Join(target, "stolen")); err == nil {
		t.Error("the container's rootfs holds a hard link to a host file")
	}

	dir = t.TempDir()
	must(t, WriteJSON(filepath.Join(dir, DeletedFilesFile), []string{"/out/secret"}))
	if err := ApplyRootfsDiff(dir, target); err == nil {
		t.Error("a deletion behind a symlink was applied")
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("the host file is gone: %v", err)
	}
}

func TestCheckCRIUMissing(t *testing.T) {
	err := CheckCRIU(t.Context(), "/nonexistent/criu")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("CheckCRIU = %v", err)
	}
	// A criu whose check fails: its message is quoted.
	bin := filepath.Join(t.TempDir(), "criu")
	must(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'Error (criu/kerndat.c:1): no vdso' >&2\nexit 1\n"), 0o755))
	err = CheckCRIU(t.Context(), bin)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !bytes.Contains([]byte(err.Error()), []byte("no vdso")) {
		t.Fatalf("CheckCRIU = %v", err)
	}
	ok := filepath.Join(t.TempDir(), "criu")
	must(t, os.WriteFile(ok, []byte("#!/bin/sh\necho Looks good.\n"), 0o755))
	must(t, CheckCRIU(t.Context(), ok))
}
