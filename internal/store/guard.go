package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// guard serialises opening the database and remembers an open that died.
//
// Some corruptions kill the process outright instead of returning an
// error: bbolt's consistency check, and its free-list rebuild on open, walk
// pages in goroutines of their own, where an assertion or fault cannot be
// recovered. Without a memory of it, a restarted daemon would die the same
// way for ever. So the guard file "<db>.opening" holds a mark while the
// database is being checked, and the next open that finds the mark still
// there treats the database as corrupt.
//
// The guard file is flock'ed for the whole open, so that a second daemon
// started meanwhile waits for the first one's check instead of mistaking its
// mark for a dead open; it then fails on bbolt's own lock.
//
// The mark is cleared by overwriting it with zeros, not by truncating the
// file: the block it occupies stays allocated, so that a daemon restarted
// on a full disk can set the mark again and open its database.
type guard struct {
	dbPath      string
	f           *os.File
	interrupted bool // a previous open died while the mark was set
}

const guardMark = "checking\n"

// lockGuard opens and locks the guard file of the database at dbPath,
// waiting at most lockTimeout for another process holding it.
func lockGuard(dbPath string) (*guard, error) {
	f, err := os.OpenFile(dbPath+".opening", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open database guard: %w", err)
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock database guard %s (is another podbayd running?): %w", f.Name(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	buf := make([]byte, len(guardMark))
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("read database guard: %w", err)
	}
	return &guard{dbPath: dbPath, f: f, interrupted: marked(buf[:n])}, nil
}

// arm sets the mark. It is not fsynced: it guards against the process
// dying, and the page cache outlives the process.
func (g *guard) arm() error {
	if _, err := g.f.WriteAt([]byte(guardMark), 0); err != nil {
		return fmt.Errorf("mark database guard: %w", err)
	}
	return nil
}

// marked reports whether the guard file's content is a mark: anything but
// zeros (a cleared mark) or nothing.
func marked(content []byte) bool {
	for _, b := range content {
		if b != 0 {
			return true
		}
	}
	return false
}

// disarm clears the mark in place.
func (g *guard) disarm() error {
	if _, err := g.f.WriteAt(make([]byte, len(guardMark)), 0); err != nil {
		return fmt.Errorf("clear database guard: %w", err)
	}
	g.interrupted = false
	return nil
}

// release unlocks the guard file.
func (g *guard) release() { g.f.Close() }
