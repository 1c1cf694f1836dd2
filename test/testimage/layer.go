package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the modification time, in Unix seconds, of every entry in every
// layer and the creation time of every image this package builds
// (2024-01-01T00:00:00Z). Fixed so that digests do not depend on when or
// where an image was built.
const Epoch = 1704067200

func epoch() time.Time { return time.Unix(Epoch, 0).UTC() }

// File is one entry of an image layer.
type File struct {
	// Path is where the entry appears in the image, such as "/etc/motd".
	// It is cleaned, and must name neither the root nor anything outside it.
	Path string
	// Content is a regular file's bytes.
	Content []byte
	// HostPath, when set, names a host file whose bytes are read at build
	// time instead of Content.
	HostPath string
	// Mode holds the type (none for a regular file, fs.ModeDir or
	// fs.ModeSymlink) and the permission bits, fs.ModeSetuid, fs.ModeSetgid
	// and fs.ModeSticky included. Permission bits of 0 mean the default:
	// 0644 for a file (the host file's bits with HostPath), 0755 for a
	// directory, 0777 for a symlink.
	Mode fs.FileMode
	// Link is a symlink's target when Mode has fs.ModeSymlink. On a regular
	// file it makes the entry a hard link to Link, which must name a regular
	// file of the same layer; such an entry has no Content of its own.
	Link string
	// UID and GID own the entry.
	UID, GID int
}

// entry is one tar entry of a layer under construction.
type entry struct {
	hdr  tar.Header
	data []byte
}

// tree is the content of one layer, keyed by cleaned relative path
// ("bin/busybox"). It writes its entries in an order that every unpacker
// accepts: directories (parents before children), then regular files, then
// symlinks, then hard links, each group sorted by path.
type tree struct {
	entries map[string]*entry
}

func newTree() *tree { return &tree{entries: map[string]*entry{}} }

// cleanPath turns an image path into the relative form tar entries use, or
// rejects it.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	c := path.Clean("/" + p)
	if c == "/" {
		return "", fmt.Errorf("path %q names the root", p)
	}
	// path.Clean of a rooted path never keeps "..", but a relative input
	// that tried to climb out is still a mistake worth reporting.
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", fmt.Errorf("path %q leaves the root", p)
		}
	}
	return c[1:], nil
}

// tarMode converts fs.FileMode permission and special bits to tar's.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func (t *tree) add(name string, e *entry) error {
	if _, ok := t.entries[name]; ok {
		return fmt.Errorf("duplicate entry %s", name)
	}
	e.hdr.ModTime = epoch()
	t.entries[name] = e
	return nil
}

func (t *tree) dir(name string, mode fs.FileMode, uid, gid int) error {
	if mode.Perm() == 0 {
		mode |= 0o755
	}
	return t.add(name, &entry{hdr: tar.Header{
		Typeflag: tar.TypeDir, Name: name + "/", Mode: tarMode(mode), Uid: uid, Gid: gid,
	}})
}

func (t *tree) file(name string, data []byte, mode fs.FileMode, uid, gid int) error {
	if mode.Perm() == 0 {
		mode |= 0o644
	}
	return t.add(name, &entry{data: data, hdr: tar.Header{
		Typeflag: tar.TypeReg, Name: name, Mode: tarMode(mode), Uid: uid, Gid: gid, Size: int64(len(data)),
	}})
}

func (t *tree) symlink(name, target string, uid, gid int) error {
	if target == "" {
		return fmt.Errorf("symlink %s: empty target", name)
	}
	return t.add(name, &entry{hdr: tar.Header{
		Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, Uid: uid, Gid: gid,
	}})
}

// hardlink records name as a hard link to target. The target is checked in
// archive, once the whole layer is known.
func (t *tree) hardlink(name, target string, mode fs.FileMode, uid, gid int) error {
	if mode.Perm() == 0 {
		mode |= 0o644
	}
	return t.add(name, &entry{hdr: tar.Header{
		Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: tarMode(mode), Uid: uid, Gid: gid,
	}})
}

// addFile adds a caller's File.
func (t *tree) addFile(f File) error {
	name, err := cleanPath(f.Path)
	if err != nil {
		return err
	}
	switch {
	case f.Mode.IsDir():
		return t.dir(name, f.Mode, f.UID, f.GID)
	case f.Mode&fs.ModeSymlink != 0:
		return t.symlink(name, f.Link, f.UID, f.GID)
	case f.Mode.Type() != 0:
		return fmt.Errorf("%s: unsupported file type %v", f.Path, f.Mode.Type())
	case f.Link != "":
		target, err := cleanPath(f.Link)
		if err != nil {
			return fmt.Errorf("hard link %s: %w", f.Path, err)
		}
		if f.Content != nil || f.HostPath != "" {
			return fmt.Errorf("hard link %s: has content of its own", f.Path)
		}
		return t.hardlink(name, target, f.Mode, f.UID, f.GID)
	}
	data, mode := f.Content, f.Mode
	if f.HostPath != "" {
		fi, err := os.Stat(f.HostPath)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: host path %s is not a regular file", f.Path, f.HostPath)
		}
		if data, err = os.ReadFile(f.HostPath); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		if mode.Perm() == 0 {
			mode |= fi.Mode().Perm()
		}
	}
	return t.file(name, data, mode, f.UID, f.GID)
}

// addParents adds a root-owned 0755 directory for every missing parent of
// every entry, except those listed in below: directories a lower layer
// already has, whose owner and mode an implicit entry here would override
// (a "tmp/" entry would take /tmp's sticky bit away).
func (t *tree) addParents(below map[string]bool) error {
	var missing []string
	seen := map[string]bool{}
	for name := range t.entries {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				break
			}
			seen[dir] = true
			if _, ok := t.entries[dir]; !ok && !below[dir] {
				missing = append(missing, dir)
			}
		}
	}
	for _, dir := range missing {
		if err := t.dir(dir, fs.ModeDir, 0, 0); err != nil {
			return err
		}
	}
	return nil
}

// dirs returns the set of directories in the tree.
func (t *tree) dirs() map[string]bool {
	out := map[string]bool{}
	for name, e := range t.entries {
		if e.hdr.Typeflag == tar.TypeDir {
			out[name] = true
		}
	}
	return out
}

// archive returns the tree as an uncompressed tar and that tar compressed
// with gzip. Both depend only on the entries: times are fixed and the gzip
// header carries no name or time.
func (t *tree) archive() (tarball, gz []byte, err error) {
	rank := map[byte]int{tar.TypeDir: 0, tar.TypeReg: 1, tar.TypeSymlink: 2, tar.TypeLink: 3}
	names := make([]string, 0, len(t.entries))
	for name, e := range t.entries {
		if e.hdr.Typeflag == tar.TypeLink {
			target, ok := t.entries[e.hdr.Linkname]
			if !ok || target.hdr.Typeflag != tar.TypeReg {
				return nil, nil, fmt.Errorf("hard link %s: target %s is not a regular file of this layer", name, e.hdr.Linkname)
			}
		}
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := t.entries[names[i]], t.entries[names[j]]
		if ra, rb := rank[a.hdr.Typeflag], rank[b.hdr.Typeflag]; ra != rb {
			return ra < rb
		}
		return names[i] < names[j]
	})

	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, name := range names {
		e := t.entries[name]
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, nil, fmt.Errorf("write tar header %s: %w", name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, nil, fmt.Errorf("write tar entry %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, fmt.Errorf("close tar: %w", err)
	}

	return tb.Bytes(), gzipBytes(tb.Bytes()), nil
}

// gzipBytes compresses b with a gzip header that carries no name or time,
// so that the result depends on b alone. Writing to memory cannot fail.
func gzipBytes(b []byte) []byte {
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.DefaultCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return zb.Bytes()
}

// memLayer is a layer held in memory in both forms, its digests computed
// once. Its own media type does not matter: Build sets the one of the
// image's format on every layer it appends.
type memLayer struct {
	tar, gz        []byte
	digest, diffID v1.Hash
}

var _ v1.Layer = (*memLayer)(nil)

func newMemLayer(tarball, gz []byte) *memLayer {
	return &memLayer{tar: tarball, gz: gz, digest: sha256Hash(gz), diffID: sha256Hash(tarball)}
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// Digest is the digest of the compressed layer.
func (l *memLayer) Digest() (v1.Hash, error) { return l.digest, nil }

// DiffID is the digest of the uncompressed layer.
func (l *memLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }

// Compressed returns the gzip-compressed tar.
func (l *memLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.gz)), nil
}

// Uncompressed returns the tar.
func (l *memLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.tar)), nil
}

// Size is the size of the compressed layer.
func (l *memLayer) Size() (int64, error) { return int64(len(l.gz)), nil }

// MediaType is the OCI gzip layer type.
func (l *memLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
