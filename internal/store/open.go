package store

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/podbay/podbay/internal/log"
)

// lockTimeout bounds the wait for another process holding the database.
const lockTimeout = 2 * time.Second

// ErrCorrupt classifies a database file whose content cannot be trusted:
// bbolt refuses it, panics or faults reading it, its consistency check
// fails, or a previous open died while checking it. Lock timeouts,
// permission and other I/O errors are not ErrCorrupt.
var ErrCorrupt = errors.New("database corrupt")

// Open opens (creating if needed) the database at path and checks that all
// of it can be read (about 1 ms per 1000 records). It fails fast if another
// process holds the database open. A corrupt file yields an error wrapping
// ErrCorrupt and is left in place; Open does not panic on it.
func Open(path string) (*DB, error) {
	db, _, err := open(path, false)
	return db, err
}

// OpenOrQuarantine is Open, except that a corrupt database is moved aside to
// "<path>.corrupt-<UTC time>" (kept for inspection, never deleted), reported
// at error level on ctx's logger, and replaced by an empty database. The
// records it held are lost: the caller's startup garbage collection is what
// reclaims the host resources they described. Errors that are not ErrCorrupt
// (another process holds the database, permissions, I/O) are returned as
// from Open, and nothing is moved.
func OpenOrQuarantine(ctx context.Context, path string) (*DB, error) {
	db, q, err := open(path, true)
	if q != nil {
		log.G(ctx).Error("database is corrupt: moved it aside and started with an empty one; "+
			"resources of the pods it recorded will be garbage-collected and the kubelet will recreate the pods",
			"path", path, "moved_to", q.movedTo, "reason", q.reason)
	}
	return db, err
}

// quarantined reports a database moved aside by open.
type quarantined struct {
	movedTo string
	reason  error
}

func open(path string, moveCorrupt bool) (*DB, *quarantined, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("create state dir: %w", err)
	}
	g, err := lockGuard(path)
	if err != nil {
		return nil, nil, err
	}
	defer g.release()

	db, err := g.openLocked()
	if !moveCorrupt || !errors.Is(err, ErrCorrupt) {
		return db, nil, err
	}
	movedTo, mvErr := moveAside(path, time.Now())
	if mvErr != nil {
		return nil, nil, fmt.Errorf("%w; move it aside: %w", err, mvErr)
	}
	q := &quarantined{movedTo: movedTo, reason: err}
	if err := g.disarm(); err != nil {
		return nil, q, err
	}
	db, err = g.openLocked()
	if err != nil {
		return nil, q, fmt.Errorf("open empty database after moving the corrupt one aside: %w", err)
	}
	return db, q, nil
}

// moveAside renames the database at path (if there is one) to
// "<path>.corrupt-<UTC time>" and syncs the directory so that the rename
// survives a crash. It returns the new name.
func moveAside(path string, now time.Time) (string, error) {
	dst := path + ".corrupt-" + now.UTC().Format("20060102T150405.000Z")
	if err := os.Rename(path, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return dst, err
	}
	defer dir.Close()
	return dst, dir.Sync()
}

// openLocked opens and verifies the database; g must be held. The mark is
// set once bbolt holds its lock: a process killed while waiting for another
// daemon's lock has not found anything wrong with the file.
func (g *guard) openLocked() (*DB, error) {
	if g.interrupted {
		return nil, fmt.Errorf("open database %s: %w: a previous open died while checking it", g.dbPath, ErrCorrupt)
	}
	// bbolt initialises a zero-length file as a new database; here it can
	// only be one whose content a crash lost.
	if st, err := os.Stat(g.dbPath); err == nil && st.Size() == 0 {
		return nil, fmt.Errorf("open database %s: %w: zero-length file", g.dbPath, ErrCorrupt)
	}
	var db *bolt.DB
	err := recoverCorrupt(g.dbPath, func() error {
		var err error
		db, err = bolt.Open(g.dbPath, 0o600, &bolt.Options{Timeout: lockTimeout})
		if err != nil {
			return classifyOpenError(g.dbPath, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := g.arm(); err != nil {
		_ = db.Close()
		return nil, err
	}
	err = recoverCorrupt(g.dbPath, func() error {
		if err := verify(db); err != nil {
			return fmt.Errorf("open database %s: %w: %w", g.dbPath, ErrCorrupt, err)
		}
		return nil
	})
	if dErr := g.disarm(); dErr != nil && err == nil {
		err = dErr
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &DB{db: db}, nil
}

// recoverCorrupt runs fn, which reads the database file at path, and turns
// a panic or memory fault into an error wrapping ErrCorrupt. bbolt reads the
// file through a memory map and trusts what it finds: a torn page shows up
// as an assertion panic, and a truncated file as a fault past the end of the
// file; SetPanicOnFault makes the fault a panic of this goroutine. A panic
// inside bolt.Open leaks its file descriptor and lock; that happens once, at
// startup, before the file is moved aside.
func recoverCorrupt(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("open database %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	return fn()
}

// classifyOpenError tells a corrupt file from a database that is merely
// unavailable: a lock held by another process, a permission or other error
// of the file system is returned as is, for an operator to fix.
func classifyOpenError(path string, err error) error {
	var pathErr *fs.PathError
	var errno syscall.Errno
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open database %s: held by another process (is another podbayd running?): %w", path, err)
	case errors.As(err, &pathErr), errors.As(err, &errno):
		return fmt.Errorf("open database %s: %w", path, err)
	default:
		return fmt.Errorf("open database %s: %w: %w", path, ErrCorrupt, err)
	}
}

// verify reads every bucket, key and value, then runs bbolt's consistency
// check (page accounting and free list). The read comes first and runs in
// the caller's goroutine, where recoverCorrupt catches a panic or fault:
// Check walks the pages in a goroutine of its own, where a torn page would
// kill the process.
func verify(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return readBucket(b) }); err != nil {
			return err
		}
		var first error
		for err := range tx.Check() { // drain: Check blocks until read
			if first == nil {
				first = fmt.Errorf("consistency check: %w", err)
			}
		}
		return first
	})
}

// readBucket touches every key and value byte of b and its nested buckets,
// so that every page is read.
func readBucket(b *bolt.Bucket) error {
	var sum uint32
	return b.ForEach(func(k, v []byte) error {
		sum = crc32.Update(sum, crc32.IEEETable, k)
		if v != nil {
			sum = crc32.Update(sum, crc32.IEEETable, v)
			return nil
		}
		if nested := b.Bucket(k); nested != nil {
			return readBucket(nested)
		}
		return nil
	})
}
