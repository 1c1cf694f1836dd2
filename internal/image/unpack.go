package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	// The overlay driver's package must be initialized before this one
	// replaces its untar.
	_ "go.podman.io/storage/drivers/overlay"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/chrootarchive"
	"go.podman.io/storage/pkg/idtools"
	"go.podman.io/storage/pkg/unshare"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// containers/storage's overlay driver unpacks each layer through its
// package variable untar, chrootarchive.UntarUncompressed: a re-executed
// copy of the daemon ("storage-untar") that chroots into the layer's diff
// directory and unpacks the tar it reads on stdin. The chroot is what stops
// a hostile tar from writing outside the layer through its own symlinks
// ("a -> /etc", then "a/passwd"). The child costs a fork and exec of the
// whole podbayd and its Go package initialization, about 20 ms, per layer:
// more than unpacking a small layer takes.
//
// unpackConfined does the same unpacking in this process: on a goroutine
// locked to an OS thread that unshares its filesystem attributes
// (CLONE_FS), so that its root directory is its own, and chroots into the
// layer's diff directory, opened first as the child's is. The thread never
// runs anything else: the goroutine exits locked, so the Go runtime ends
// the thread, and the runtime does not clone new threads from a locked
// one. It is never the main thread (onOwnThread), whose root the kernel
// uses for /proc/self. The protection is the child's chroot: every path
// the tar names resolves inside the layer. (The child pivot_roots into a
// private mount namespace when it can and chroots when it cannot; neither
// leaves anything but the layer reachable by path, and the unpacking code
// runs no program.) Digests are untouched: containers/image and
// containers/storage verify the stream around this function as before.
//
// The variable is replaced through go:linkname, which the Go toolchain
// checks by name only, so the replacement is installed only with the
// containers/storage version whose overlay.untar was read and found to be
// a func(io.Reader, string, *archive.TarOptions) error; a binary built
// with any other version keeps the re-executed child (podbayd logs which
// at start), and TestUnpackVerifiedVersion fails on go.mod so that the next
// upgrade re-checks it.

//go:linkname overlayUntar go.podman.io/storage/drivers/overlay.untar
var overlayUntar func(io.Reader, string, *archive.TarOptions) error

// unpackVerifiedStorage is the containers/storage version overlayUntar was
// checked against.
const unpackVerifiedStorage = "v1.65.1"

// unpackInProcess reports whether the overlay driver unpacks in process.
var unpackInProcess bool

// unpackFallback is set once the confined thread could not be set up
// (unshare or chroot refused, as under a seccomp profile that denies
// them): from then on every layer goes to the re-executed child.
var unpackFallback atomic.Bool

// layerUnpackObserver, when set, receives the duration of each layer
// unpacked in process (New sets it to the pull metrics' "layer", "unpack").
var layerUnpackObserver atomic.Pointer[func(time.Duration)]

func init() {
	switch storageModuleVersion() {
	case unpackVerifiedStorage:
	case "":
		// A test binary: it carries no dependency versions.
		// TestUnpackVerifiedVersion checks go.mod's instead.
	default:
		return
	}
	overlayUntar = unpackConfined
	unpackInProcess = true
}

// unpackMode describes how driver's layers are unpacked, for the log.
func unpackMode(driver string) string {
	switch {
	case driver != "overlay" && driver != "overlay2":
		return "re-executed child"
	case !unpackInProcess:
		return "re-executed child (containers/storage " + storageModuleVersion() + " not verified for in-process unpacking)"
	case unpackFallback.Load():
		return "re-executed child (confined thread unavailable)"
	}
	return "in process, chrooted thread"
}

// storageModuleVersion is the containers/storage version linked in: ""
// when the binary records no dependencies (go test's), "replaced" when
// go.mod replaces the module.
func storageModuleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, dep := range info.Deps {
		if dep.Path == "go.podman.io/storage" {
			if dep.Replace != nil {
				return "replaced"
			}
			return dep.Version
		}
	}
	return ""
}

// warmOutside runs, before the first chroot, what the unpacking would
// otherwise initialize once for the whole process from inside it, where
// /proc and /etc are the layer's: containers/storage's rootless check
// (the overlay xattr names depend on it) and the local time zone (a log
// line's timestamp).
var warmOutside = sync.OnceFunc(func() {
	_ = unshare.IsRootless()
	_, _ = time.Now().Local().Zone()
})

// errConfineSetup is a failure to set up the confined thread, before
// anything was read from the layer.
var errConfineSetup = errors.New("cannot confine the unpacking thread")

// unpackConfined unpacks the uncompressed layer tar r into dest, confined
// to dest; it replaces chrootarchive.UntarUncompressed and behaves as it.
func unpackConfined(r io.Reader, dest string, options *archive.TarOptions) error {
	// ID-mapped layers keep c/storage's own path: that is what they were
	// tested with.
	if unpackFallback.Load() || options == nil || len(options.UIDMaps) > 0 || len(options.GIDMaps) > 0 {
		return chrootarchive.UntarUncompressed(r, dest, options)
	}
	if r == nil {
		return errors.New("empty archive")
	}
	start := time.Now()
	warmOutside()
	dest = filepath.Clean(dest)
	if _, err := os.Lstat(dest); errors.Is(err, os.ErrNotExist) {
		if err := idtools.MkdirAllAndChownNew(dest, 0o755, idtools.IDPair{}); err != nil {
			return err
		}
	}
	// The directory is opened here and entered by descriptor, so that a
	// path component swapped for a symlink meanwhile does not move the
	// root (as chrootarchive does it).
	root, err := os.OpenFile(dest, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer root.Close()

	err = onOwnThread(func() error { return unpackInRoot(r, int(root.Fd()), options) })
	if errors.Is(err, errConfineSetup) {
		// Nothing was read yet: the child can still do it.
		unpackFallback.Store(true)
		return chrootarchive.UntarUncompressed(r, dest, options)
	}
	if err != nil {
		return fmt.Errorf("unpacking failed: %w", classifyUnpackError(err))
	}
	// As the child does: read what follows the tar's end (its zero
	// padding), which the caller's tar-split still records.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if obs := layerUnpackObserver.Load(); obs != nil {
		(*obs)(time.Since(start))
	}
	return nil
}

// classifyUnpackError marks a failure that the layer's own entries caused
// (a file written through a symlink that, confined, points nowhere; a hard
// link to a file the layer does not have; a whiteout of "..") as the
// image's fault, InvalidArgument, rather than Unknown. A failure to read
// the stream (the registry, decompression) and a host that could not
// write (full disk, I/O error, out of memory) keep their own class.
func classifyUnpackError(err error) error {
	var stream *streamError
	if errors.As(err, &stream) || errdefs.IsDiskFull(err) {
		return err
	}
	for _, errno := range []unix.Errno{unix.EIO, unix.ENOMEM, unix.EROFS, unix.ENOSPC, unix.EDQUOT} {
		if errors.Is(err, errno) {
			return err
		}
	}
	return fmt.Errorf("the layer's entries cannot be unpacked inside it: %w: %w", err, errdefs.ErrInvalidArgument)
}

// streamError is a failure to read the layer stream, as opposed to one
// its content caused.
type streamError struct{ err error }

func (e *streamError) Error() string { return e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// isMainThread reports whether the calling (locked) goroutine runs on the
// process's main thread; a variable for the tests.
var isMainThread = func() bool { return unix.Gettid() == unix.Getpid() }

// onOwnThread runs f on a goroutine locked to a thread that ends with it,
// and returns its error. That thread is never the main thread: the Go
// runtime does not end the main thread but parks it forever, with the
// root f gave it, and the main thread's root is what the kernel resolves
// /proc/self/mountinfo against (containers/storage's and podbay's mount
// checks would see only the layer).
func onOwnThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if isMainThread() {
			// Hold the main thread, so that the nested goroutine gets
			// another, and give it back unchanged.
			defer runtime.UnlockOSThread()
			inner := make(chan error, 1)
			go func() {
				runtime.LockOSThread() // never unlocked: see unpackConfined
				inner <- f()
			}()
			done <- <-inner
			return
		}
		// Never unlocked: the thread's root is the layer, so it must end
		// with this goroutine.
		done <- f()
	}()
	return <-done
}

// unpackInRoot runs on a locked thread of its own: it makes the directory
// rootFd the thread's root and unpacks r there.
func unpackInRoot(r io.Reader, rootFd int, options *archive.TarOptions) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic while unpacking: %v", p)
		}
	}()
	if unix.Gettid() == unix.Getpid() {
		return fmt.Errorf("%w: on the main thread", errConfineSetup)
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("%w: unshare: %w", errConfineSetup, err)
	}
	if err := unix.Fchdir(rootFd); err != nil {
		return fmt.Errorf("%w: fchdir: %w", errConfineSetup, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("%w: chroot: %w", errConfineSetup, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("%w: chdir: %w", errConfineSetup, err)
	}
	// r is fed by other goroutines (decompression, tar-split) in small
	// writes; a locked thread is woken by a futex for each, so it reads
	// from a prefetcher that hands it large chunks instead.
	pr := newPrefetcher(r)
	defer pr.stop()
	if err := archive.Unpack(pr, "/", options); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, pr)
	return err
}

// Prefetching: chunks of prefetchChunk bytes, at most prefetchChunks of
// them read ahead.
const (
	prefetchChunk  = 256 << 10
	prefetchChunks = 8
)

// prefetcher reads a stream ahead on a goroutine of its own.
type prefetcher struct {
	full   chan []byte // chunks read, in order; closed at the end
	free   chan []byte // consumed chunks' buffers, for reuse
	stopc  chan struct{}
	exited chan struct{}
	err    error // why reading ended (io.EOF at the end); set before full is closed

	cur []byte // what is left of the chunk being read
	buf []byte // that chunk's whole buffer
}

func newPrefetcher(r io.Reader) *prefetcher {
	p := &prefetcher{
		full:   make(chan []byte, prefetchChunks),
		free:   make(chan []byte, prefetchChunks),
		stopc:  make(chan struct{}),
		exited: make(chan struct{}),
	}
	go p.fill(r)
	return p
}

func (p *prefetcher) fill(r io.Reader) {
	defer close(p.exited)
	defer close(p.full)
	allocated := 0
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		default:
			if allocated < prefetchChunks {
				buf = make([]byte, prefetchChunk)
				allocated++
			} else {
				select {
				case buf = <-p.free:
				case <-p.stopc:
					return
				}
			}
		}
		n := 0
		var err error
		for n < len(buf) && err == nil {
			var m int
			m, err = r.Read(buf[n:])
			n += m
			select {
			case <-p.stopc:
				return
			default:
			}
		}
		if n > 0 {
			select {
			case p.full <- buf[:n]:
			case <-p.stopc:
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				err = &streamError{err: err}
			}
			p.err = err
			return
		}
	}
}

// Read returns the stream's bytes in order, then its error (io.EOF).
func (p *prefetcher) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.buf != nil {
			p.free <- p.buf // never blocks: at most prefetchChunks buffers exist
			p.buf = nil
		}
		chunk, ok := <-p.full
		if !ok {
			if p.err == nil {
				return 0, errors.New("prefetch stopped")
			}
			return 0, p.err
		}
		p.cur, p.buf = chunk, chunk[:cap(chunk)]
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// stop ends the reading ahead and waits until the stream is no longer
// read.
func (p *prefetcher) stop() {
	close(p.stopc)
	<-p.exited
}
