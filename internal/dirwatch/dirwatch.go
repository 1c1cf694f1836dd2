// Package dirwatch tells whether anything in a set of directories changed
// since it was last asked. It keeps no goroutine and never lists the
// directories: an inotify instance queues the kernel's events, and each
// Changed drains that queue without blocking. A caller that reloads a
// directory's files only when Changed says so pays one read(2) per call
// when nothing changed, and misses nothing: the kernel queues an event
// before the write that caused it returns.
package dirwatch

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mask is every change to a directory's entries or to the files in it,
// and the directory's own removal or move.
const mask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// Watcher watches a fixed set of directories. A directory missing when
// New is called, or removed later, is looked for again by each Changed
// (one inotify_add_watch(2) each); its appearance counts as a change.
// Safe for concurrent use.
type Watcher struct {
	mu      sync.Mutex
	fd      int            // guarded by mu; -1 once closed
	dirs    []string       // in the caller's order
	wds     map[int]string // watch descriptor → directory; guarded by mu
	watched map[string]int // directory → watch descriptor; guarded by mu
	buf     []byte         // guarded by mu
	// blind: no inotify instance; every Changed reports a change.
	blind bool
}

// New watches dirs. Missing directories are not an error. When no
// inotify instance can be had (the user's fs.inotify.max_user_instances
// is reached), it returns the error and a Watcher whose Changed always
// reports a change: the caller still sees every change, at the cost of a
// reload per call.
func New(dirs []string) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &Watcher{fd: -1, blind: true}, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{
		fd:      fd,
		dirs:    append([]string(nil), dirs...),
		wds:     map[int]string{},
		watched: map[string]int{},
		buf:     make([]byte, 64*1024),
	}
	w.mu.Lock()
	w.addMissingLocked()
	w.mu.Unlock()
	return w, nil
}

// Changed reports whether any of the directories, or a file in one, was
// created, written, removed, renamed or had its attributes changed since
// the previous call (or since New), and whether a missing directory
// appeared. An overflowed event queue counts as a change.
func (w *Watcher) Changed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return w.blind
	}
	changed := false
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			// EAGAIN: the queue is empty. Any other error: the next
			// call tries again; reporting a change makes the caller
			// reload, which is always safe.
			if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
				changed = true
			}
			break
		}
		changed = true
		w.forgetGoneLocked(w.buf[:n])
	}
	if w.addMissingLocked() {
		changed = true
	}
	return changed
}

// forgetGoneLocked drops the watches of directories that were removed or
// moved away, so that addMissingLocked looks for them again.
func (w *Watcher) forgetGoneLocked(buf []byte) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		off += unix.SizeofInotifyEvent + int(ev.Len)
		wd := int(ev.Wd)
		if _, ok := w.wds[wd]; !ok {
			continue
		}
		switch {
		case ev.Mask&unix.IN_IGNORED != 0:
			// The kernel removed the watch (the directory is gone).
		case ev.Mask&unix.IN_MOVE_SELF != 0:
			// The watch follows the moved directory; the path no
			// longer names it.
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
		default:
			continue
		}
		delete(w.wds, wd)
		for dir, d := range w.watched {
			if d == wd {
				delete(w.watched, dir)
			}
		}
	}
}

// addMissingLocked watches the directories not watched yet and reports
// whether it added any.
func (w *Watcher) addMissingLocked() bool {
	added := false
	for _, dir := range w.dirs {
		if _, ok := w.watched[dir]; ok {
			continue
		}
		wd, err := unix.InotifyAddWatch(w.fd, dir, mask)
		if err != nil {
			continue
		}
		// Two paths naming one directory share its watch descriptor.
		if _, ok := w.wds[wd]; !ok {
			w.wds[wd] = dir
			added = true
		}
		w.watched[dir] = wd
	}
	return added
}

// Watched returns the directories watched now, in the order given to New.
func (w *Watcher) Watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, dir := range w.dirs {
		if _, ok := w.watched[dir]; ok {
			out = append(out, dir)
		}
	}
	return out
}

// Close releases the inotify instance. Changed then reports no change.
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blind = false
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	return err
}
