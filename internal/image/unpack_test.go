package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/chrootarchive"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// The overlay driver unpacks through unpackConfined. This fails when a
// containers/storage upgrade switched it back to the re-executed child:
// check that drivers/overlay still has `var untar` of the same type, then
// update unpackVerifiedStorage.
func TestUnpackInProcessActive(t *testing.T) {
	if !unpackInProcess {
		t.Fatalf("containers/storage %s is not the version drivers/overlay.untar was checked in (%s): "+
			"layers are unpacked by the re-executed child", storageModuleVersion(), unpackVerifiedStorage)
	}
	if reflect.ValueOf(overlayUntar).Pointer() != reflect.ValueOf(unpackConfined).Pointer() {
		t.Fatal("drivers/overlay.untar is not unpackConfined")
	}
	if got := unpackMode("overlay"); got != "in process, chrooted thread" {
		t.Errorf("unpackMode = %q", got)
	}
}

// The containers/storage that go.mod pins is the one whose overlay.untar
// was checked (the test binary records no dependency versions, so init
// cannot see it there).
func TestUnpackVerifiedVersion(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "go.podman.io/storage " + unpackVerifiedStorage
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "go.podman.io/storage ") {
			if line != want {
				t.Fatalf("go.mod has %q; overlay.untar was checked in %s: check that drivers/overlay "+
					"still has `var untar func(io.Reader, string, *archive.TarOptions) error` and update unpackVerifiedStorage",
					line, unpackVerifiedStorage)
			}
			return
		}
	}
	t.Fatal("containers/storage not found in go.mod")
}

// tarEntry is one entry of a test tar.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func buildTar(t *testing.T, entries []tarEntry, padding int) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		h.Format = tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	buf.Write(make([]byte, padding))
	return buf.Bytes()
}

// countingReader counts what was read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// treeOf describes everything the unpacking sets on each path under root.
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d rdev=%d nlink=%d", st.Mode, st.Uid, st.Gid, st.Rdev, st.Nlink)
		switch {
		case rel == ".":
			// The root's own times are the test's.
		case st.Mtim.Sec > time.Now().Add(-time.Hour).Unix():
			// The test tars' times are years old: a recent one is the
			// unpacking's own (a whiteout it made, or the directory it
			// made one in), a second apart between two unpackings
			// when the clock ticks in between.
			desc += " mtime=unpacked"
		default:
			desc += fmt.Sprintf(" mtime=%d", st.Mtim.Sec)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case unix.S_IFREG:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			desc += " sha256=" + hex.EncodeToString(sum[:8])
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			sz, err := unix.Llistxattr(path, nil)
			if err == nil && sz > 0 {
				names := make([]byte, sz)
				sz, _ = unix.Llistxattr(path, names)
				list := strings.Split(strings.TrimRight(string(names[:sz]), "\x00"), "\x00")
				slices.Sort(list)
				for _, name := range list {
					val := make([]byte, 256)
					n, _ := unix.Lgetxattr(path, name, val)
					desc += fmt.Sprintf(" xattr %s=%q", name, val[:max(n, 0)])
				}
			}
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The in-process unpacking produces exactly the tree containers/storage's
// re-executed child produces, for every kind of entry an image layer has
// (overlay whiteouts and opaque directories included), and reads the
// stream to its end as the child does.
func TestUnpackConfinedMatchesChild(t *testing.T) {
	requireRoot(t)
	entries := []tarEntry{
		{hdr: tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o4755}, body: "#!/bin/sh\necho tool\n"},
		{hdr: tar.Header{Name: "bin/alias", Typeflag: tar.TypeSymlink, Linkname: "tool"}},
		{hdr: tar.Header{Name: "bin/abs", Typeflag: tar.TypeSymlink, Linkname: "/bin/tool"}},
		{hdr: tar.Header{Name: "bin/hard", Typeflag: tar.TypeLink, Linkname: "bin/tool"}},
		{hdr: tar.Header{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 1000, Gid: 1001}},
		{hdr: tar.Header{Name: "home/user/file", Typeflag: tar.TypeReg, Mode: 0o600, Uid: 1000, Gid: 1001}, body: "data"},
		{hdr: tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}},
		{hdr: tar.Header{Name: "run/fifo", Typeflag: tar.TypeFifo, Mode: 0o644}},
		{hdr: tar.Header{Name: "etc/.wh.removed", Typeflag: tar.TypeReg, Mode: 0o644}},
		{hdr: tar.Header{Name: "var/cache/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644}},
		{hdr: tar.Header{Name: "var/cache/kept", Typeflag: tar.TypeReg, Mode: 0o644}, body: "kept"},
		{hdr: tar.Header{Name: "empty", Typeflag: tar.TypeReg, Mode: 0o444}},
		{hdr: tar.Header{Name: "x/../y", Typeflag: tar.TypeReg, Mode: 0o644}, body: "cleaned"},
	}
	// A big file too, so that the stream spans several prefetch chunks.
	entries = append(entries, tarEntry{hdr: tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644},
		body: strings.Repeat("0123456789abcdef", 3*prefetchChunk/16+100)})
	data := buildTar(t, entries, 4096)
	opts := func() *archive.TarOptions {
		return &archive.TarOptions{WhiteoutFormat: archive.OverlayWhiteoutFormat}
	}

	inProc := filepath.Join(t.TempDir(), "diff")
	// As c/storage feeds it: through a pipe, in small writes.
	pr, pw := io.Pipe()
	go func() {
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 512)
			if _, err := pw.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		pw.Close()
	}()
	cr := &countingReader{r: pr}
	if err := unpackConfined(cr, inProc, opts()); err != nil {
		t.Fatalf("unpackConfined: %v", err)
	}
	if cr.n != len(data) {
		t.Errorf("unpackConfined read %d of %d bytes: the padding after the tar must be consumed", cr.n, len(data))
	}
	if unpackFallback.Load() {
		t.Fatal("unpackConfined fell back to the re-executed child")
	}
	child := filepath.Join(t.TempDir(), "diff")
	if err := chrootarchive.UntarUncompressed(bytes.NewReader(data), child, opts()); err != nil {
		t.Fatalf("UntarUncompressed: %v", err)
	}

	got, want := treeOf(t, inProc), treeOf(t, child)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for p := range got {
			seen[p] = true
		}
		for p := range want {
			seen[p] = true
		}
		for p := range seen {
			if !yield(p) {
				return
			}
		}
	}) {
		if got[p] != want[p] {
			t.Errorf("%s:\n in process %s\n child      %s", p, got[p], want[p])
		}
	}
	// A few things the comparison alone would not show to be right.
	if !strings.Contains(got["etc/removed"], "rdev=0") || !strings.Contains(got["etc/removed"], fmt.Sprintf("mode=%o", unix.S_IFCHR)) {
		t.Errorf("whiteout: %q, want a 0:0 character device", got["etc/removed"])
	}
	if !strings.Contains(got["var/cache"], `overlay.opaque="y"`) {
		t.Errorf("opaque dir: %q", got["var/cache"])
	}
	if !strings.Contains(got["bin/abs"], "-> /bin/tool") || !strings.Contains(got["bin/tool"], "nlink=2") {
		t.Errorf("links: %q %q", got["bin/abs"], got["bin/tool"])
	}
}

// A hostile layer cannot write outside its directory through its own
// symlinks or links, and the chroot does not leak to the rest of the
// process: the thread that had it is gone.
func TestUnpackConfinedStaysInside(t *testing.T) {
	requireRoot(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "layer", "diff")
	rel := strings.Repeat("../", 12) + strings.TrimPrefix(outside, "/")
	for i, entries := range [][]tarEntry{
		{ // an absolute symlink to a directory, then a file through it
			{hdr: tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: outside}},
			{hdr: tar.Header{Name: "abs/pwned", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
		},
		{ // the same through a relative symlink climbing out
			{hdr: tar.Header{Name: "rel", Typeflag: tar.TypeSymlink, Linkname: rel}},
			{hdr: tar.Header{Name: "rel/pwned", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
		},
		{ // a file written through a symlink to its directory
			{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: outside}},
			{hdr: tar.Header{Name: "evil/victim", Typeflag: tar.TypeReg, Mode: 0o644}, body: "overwritten"},
		},
		{ // a hard link to a file outside
			{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: rel + "/victim"}},
			{hdr: tar.Header{Name: "sym", Typeflag: tar.TypeSymlink, Linkname: outside}},
			{hdr: tar.Header{Name: "hl2", Typeflag: tar.TypeLink, Linkname: "sym/victim"}},
		},
	} {
		// An error is fine (a path inside that does not exist); a write
		// outside is not.
		err := unpackConfined(bytes.NewReader(buildTar(t, entries, 0)), dest, &archive.TarOptions{WhiteoutFormat: archive.OverlayWhiteoutFormat})
		t.Logf("case %d: %v", i, err)
		names, _ := os.ReadDir(outside)
		if len(names) != 1 {
			t.Errorf("case %d wrote outside the layer: %v", i, names)
		}
		data, _ := os.ReadFile(filepath.Join(outside, "victim"))
		if string(data) != "original" {
			t.Errorf("case %d changed a file outside the layer: %q", i, data)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(outside, "victim"), &st); err == nil && st.Nlink != 1 {
			t.Errorf("case %d hard-linked a file outside the layer (nlink %d)", i, st.Nlink)
		}
	}
	if unpackFallback.Load() {
		t.Fatal("unpackConfined fell back to the re-executed child")
	}

	// Every thread still sees the host's root: many goroutines, each on
	// a thread of its own, find the outside directory by its path.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := os.Stat(filepath.Join(outside, "victim")); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("after unpacking, a goroutine sees another root: %v", err)
	}
}

// A broken tar is an error, and the layer's stream is not read past it.
func TestUnpackConfinedBadTar(t *testing.T) {
	requireRoot(t)
	dest := filepath.Join(t.TempDir(), "diff")
	err := unpackConfined(strings.NewReader(strings.Repeat("not a tar ", 100)), dest, &archive.TarOptions{})
	if err == nil || !strings.Contains(err.Error(), "unpacking failed") {
		t.Fatalf("unpackConfined(garbage) = %v, want an unpacking error", err)
	}
}

// The prefetcher returns the stream exactly, its error at the end, and,
// stopped early, no longer reads the stream once stop returns.
func TestPrefetcher(t *testing.T) {
	data := bytes.Repeat([]byte("podbay"), prefetchChunk)
	p := newPrefetcher(iotestHalfReader{bytes.NewReader(data)})
	got, err := io.ReadAll(p)
	p.stop()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAll = %d bytes, %v; want %d bytes", len(got), err, len(data))
	}

	boom := errors.New("boom")
	p = newPrefetcher(io.MultiReader(bytes.NewReader(data[:1000]), errReader{boom}))
	got, err = io.ReadAll(p)
	p.stop()
	if !errors.Is(err, boom) || len(got) != 1000 {
		t.Fatalf("ReadAll = %d bytes, %v; want 1000 bytes, boom", len(got), err)
	}

	// Stopped after one read: the producer is gone, nothing reads r.
	cr := &countingReader{r: bytes.NewReader(bytes.Repeat(data, 8))}
	p = newPrefetcher(cr)
	if _, err := p.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	p.stop()
	n := cr.n
	time.Sleep(10 * time.Millisecond)
	if cr.n != n || n > (prefetchChunks+1)*prefetchChunk {
		t.Errorf("read %d then %d bytes after stop; at most %d ahead", n, cr.n, (prefetchChunks+1)*prefetchChunk)
	}
}

type iotestHalfReader struct{ r io.Reader }

func (h iotestHalfReader) Read(p []byte) (int, error) { return h.r.Read(p[:(len(p)+1)/2]) }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Unpacking never leaves the main thread chrooted: the kernel resolves
// /proc/self (mountinfo, root) against it, and the Go runtime parks rather
// than ends a main thread whose goroutine exited locked. Many unpackings
// give the scheduler many chances to pick the main thread.
func TestUnpackLeavesMainThreadRoot(t *testing.T) {
	requireRoot(t)
	data := buildTar(t, []tarEntry{{hdr: tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"}}, 0)
	base := t.TempDir()
	for i := range 200 {
		if err := unpackConfined(bytes.NewReader(data), filepath.Join(base, fmt.Sprint(i)), &archive.TarOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if root, err := os.Readlink("/proc/self/root"); err != nil || root != "/" {
		t.Fatalf("/proc/self/root = %q, %v: the main thread was chrooted", root, err)
	}
}

// On the main thread, onOwnThread runs f on another thread and gives the
// main thread back.
func TestOnOwnThreadNotMain(t *testing.T) {
	old := isMainThread
	t.Cleanup(func() { isMainThread = old })
	var outer int
	isMainThread = func() bool {
		outer = unix.Gettid()
		return true
	}
	var inner int
	err := onOwnThread(func() error {
		inner = unix.Gettid()
		return errors.New("f's error")
	})
	if err == nil || err.Error() != "f's error" {
		t.Fatalf("onOwnThread = %v, want f's error", err)
	}
	if inner == 0 || inner == outer {
		t.Fatalf("f ran on thread %d, the held thread is %d", inner, outer)
	}
}

// A layer whose entries cannot be unpacked inside it is the image's fault
// (InvalidArgument); a stream that fails to read, or a full disk, is not.
func TestUnpackErrorClass(t *testing.T) {
	requireRoot(t)
	dest := filepath.Join(t.TempDir(), "diff")
	hostile := buildTar(t, []tarEntry{
		{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
	}, 0)
	err := unpackConfined(bytes.NewReader(hostile), dest, &archive.TarOptions{WhiteoutFormat: archive.OverlayWhiteoutFormat})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("hostile layer: %v, want InvalidArgument", err)
	}
	// A file under a symlink to an absolute path: containers/storage
	// v1.65 resolves the link inside the layer (v1.58 refused the entry),
	// so it lands there, never on the host.
	dest = filepath.Join(t.TempDir(), "diff")
	escaping := buildTar(t, []tarEntry{
		{hdr: tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/nonexistent-outside"}},
		{hdr: tar.Header{Name: "abs/pwned", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
	}, 0)
	if err := unpackConfined(bytes.NewReader(escaping), dest, &archive.TarOptions{WhiteoutFormat: archive.OverlayWhiteoutFormat}); err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("symlinked parent: %v, want success or InvalidArgument", err)
	}
	if _, err := os.Lstat("/nonexistent-outside"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the layer wrote outside its directory: %v", err)
	}
	readErr := errors.New("connection reset by registry")
	err = unpackConfined(errReader{readErr}, filepath.Join(t.TempDir(), "diff"), &archive.TarOptions{})
	if !errors.Is(err, readErr) || errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("failing stream: %v, want its own error, not InvalidArgument", err)
	}
	if err := classifyUnpackError(fmt.Errorf("write: %w", unix.ENOSPC)); errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("full disk classified as the image's fault: %v", err)
	}
}
