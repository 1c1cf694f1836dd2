package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/log"
)

// reserveSize is the disk space the image store holds back. Removing a
// root filesystem rewrites containers/storage's layer and container lists
// (a new copy each, then a rename) before the layer's files are deleted;
// a megabyte covers lists of a few thousand entries.
const reserveSize = 1 << 20

// spaceReserve is a file of allocated blocks in the graph root that the
// store deletes when a removal fails on a full disk, so that the removal,
// which is what frees space, can go through; it is made again once there is
// room. Without it a full disk would keep every root filesystem it holds,
// and a failed create could not undo its own.
type spaceReserve struct {
	path string
	size int64
	mu   sync.Mutex // serialises release and restore
}

// restore makes the reserve if it is missing. On a disk without room it
// logs and leaves no partial file; the next restore tries again.
func (r *spaceReserve) restore(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, err := os.Stat(r.path); err == nil && st.Size() == r.size {
		return
	}
	if err := r.allocate(); err != nil {
		os.Remove(r.path)
		log.G(ctx).Warn("cannot reserve disk space for removals on a full disk", "path", r.path, "err", err)
	}
}

// allocate writes the reserve's blocks: fallocate where the file system
// has it, zeros elsewhere.
func (r *spaceReserve) allocate() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), 0, 0, r.size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		_, err = f.Write(make([]byte, r.size))
	}
	if err != nil {
		return fmt.Errorf("allocate %d bytes: %w", r.size, err)
	}
	return f.Sync()
}

// release deletes the reserve and reports whether there was one to free.
func (r *spaceReserve) release(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.Remove(r.path); err != nil {
		return false
	}
	log.G(ctx).Warn("disk full: released the reserved space to finish a removal", "path", r.path)
	return true
}
