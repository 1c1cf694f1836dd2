package testimage

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// tarEntry is one entry read back from a layer.
type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// readLayer returns the entries of l in archive order.
func readLayer(t *testing.T, l v1.Layer) []tarEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out []tarEntry
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{hdr, data})
	}
}

// byName indexes entries by name without the trailing slash of directories.
func byName(entries []tarEntry) map[string]tarEntry {
	m := map[string]tarEntry{}
	for _, e := range entries {
		name := e.hdr.Name
		if e.hdr.Typeflag == tar.TypeDir {
			name = name[:len(name)-1]
		}
		m[name] = e
	}
	return m
}

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "/etc/motd", want: "etc/motd"},
		{in: "etc/motd", want: "etc/motd"},
		{in: "/srv//app/./x", want: "srv/app/x"},
		{in: "/srv/app/", want: "srv/app"},
		{in: "", bad: true},
		{in: "/", bad: true},
		{in: ".", bad: true},
		{in: "../etc", bad: true},
		{in: "/a/../../b", bad: true},
	} {
		got, err := cleanPath(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("cleanPath(%q) = %q, want error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestFilesLayer(t *testing.T) {
	host := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(host, []byte("#!/bin/sh\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{Path: "/tmp/x", Content: []byte("x")},
		{Path: "/srv/app/hello", Content: []byte("hi"), UID: 1000, GID: 1000},
		{Path: "/srv/app/link", Mode: fs.ModeSymlink, Link: "hello"},
		{Path: "/srv/app/hard", Link: "/srv/app/hello"},
		{Path: "/usr/local/bin/prog", HostPath: host},
		{Path: "/usr/local/bin/suid", Content: []byte("s"), Mode: fs.ModeSetuid | 0o755},
		{Path: "/data", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/empty", Mode: fs.ModeDir},
	}
	l, err := filesLayer(files, map[string]bool{"tmp": true, "usr": true})
	if err != nil {
		t.Fatal(err)
	}
	entries := readLayer(t, l)
	m := byName(entries)

	// Parents the base has are not repeated (a "tmp/" entry would reset
	// /tmp's mode); the others are added root-owned 0755.
	for _, name := range []string{"tmp", "usr"} {
		if _, ok := m[name]; ok {
			t.Errorf("layer has %s/, which the base already has", name)
		}
	}
	for _, name := range []string{"srv", "srv/app", "usr/local", "usr/local/bin"} {
		e, ok := m[name]
		if !ok || e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode != 0o755 || e.hdr.Uid != 0 {
			t.Errorf("implicit parent %s: %+v", name, e.hdr)
		}
	}
	for _, tc := range []struct {
		name     string
		typ      byte
		mode     int64
		uid      int
		link     string
		contents string
	}{
		{"tmp/x", tar.TypeReg, 0o644, 0, "", "x"},
		{"srv/app/hello", tar.TypeReg, 0o644, 1000, "", "hi"},
		{"srv/app/link", tar.TypeSymlink, 0o777, 0, "hello", ""},
		{"srv/app/hard", tar.TypeLink, 0o644, 0, "srv/app/hello", ""},
		{"usr/local/bin/prog", tar.TypeReg, 0o750, 0, "", "#!/bin/sh\n"},
		{"usr/local/bin/suid", tar.TypeReg, 0o4755, 0, "", "s"},
		{"data", tar.TypeDir, 0o1777, 0, "", ""},
		{"empty", tar.TypeDir, 0o755, 0, "", ""},
	} {
		e, ok := m[tc.name]
		if !ok {
			t.Errorf("%s missing", tc.name)
			continue
		}
		h := e.hdr
		if h.Typeflag != tc.typ || h.Mode != tc.mode || h.Uid != tc.uid || h.Linkname != tc.link || string(e.data) != tc.contents {
			t.Errorf("%s: type %c mode %o uid %d link %q data %q; want %c %o %d %q %q",
				tc.name, h.Typeflag, h.Mode, h.Uid, h.Linkname, e.data, tc.typ, tc.mode, tc.uid, tc.link, tc.contents)
		}
		if h.ModTime.Unix() != Epoch {
			t.Errorf("%s: mtime %v, want the epoch", tc.name, h.ModTime)
		}
	}

	// Order: directories, files, symlinks, hard links; so a link never
	// precedes its target and a directory never follows its content.
	rank := map[byte]int{tar.TypeDir: 0, tar.TypeReg: 1, tar.TypeSymlink: 2, tar.TypeLink: 3}
	for i := 1; i < len(entries); i++ {
		a, b := entries[i-1].hdr, entries[i].hdr
		if rank[a.Typeflag] > rank[b.Typeflag] || rank[a.Typeflag] == rank[b.Typeflag] && a.Name >= b.Name {
			t.Errorf("entry %s precedes %s", a.Name, b.Name)
		}
	}
}

func TestFilesLayerErrors(t *testing.T) {
	for name, files := range map[string][]File{
		"duplicate":            {{Path: "/a"}, {Path: "a"}},
		"root":                 {{Path: "/", Mode: fs.ModeDir}},
		"escape":               {{Path: "../a"}},
		"hard link to nothing": {{Path: "/a", Link: "/b"}},
		"hard link to dir":     {{Path: "/d", Mode: fs.ModeDir}, {Path: "/a", Link: "/d"}},
		"hard link content":    {{Path: "/b"}, {Path: "/a", Link: "/b", Content: []byte("x")}},
		"symlink no target":    {{Path: "/a", Mode: fs.ModeSymlink}},
		"device":               {{Path: "/a", Mode: fs.ModeDevice}},
		"missing host file":    {{Path: "/a", HostPath: "/nonexistent/podbay-testimage"}},
		"host dir":             {{Path: "/a", HostPath: "/"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := filesLayer(files, nil); err == nil {
				t.Fatal("filesLayer succeeded")
			}
		})
	}
}

func TestFilesLayerDeterministic(t *testing.T) {
	files := []File{
		{Path: "/b/two", Content: []byte("2")},
		{Path: "/a/one", Content: []byte("1")},
		{Path: "/a/link", Link: "/a/one"},
	}
	reversed := []File{files[2], files[1], files[0]}
	l1, err := filesLayer(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := filesLayer(reversed, nil)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l1.Digest()
	d2, _ := l2.Digest()
	if d1 != d2 {
		t.Fatalf("same files in another order: digest %s, then %s", d1, d2)
	}
}
