package store

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrHeld is returned by OpenReadOnly when another process (a running
// podbayd) holds the database: bbolt's read-only open takes a shared lock,
// which waits while the daemon holds its exclusive one.
var ErrHeld = errors.New("database held by another process")

// OpenReadOnly opens the database at path for reading only, for tools that
// inspect a stopped daemon's records (podbay doctor): nothing is created,
// locked for writing, checked or moved. It waits at most timeout for a
// process holding the database, then fails with an error wrapping ErrHeld.
// A missing file is an error wrapping fs.ErrNotExist; a file on which bbolt
// panics is an error wrapping ErrCorrupt.
func OpenReadOnly(path string, timeout time.Duration) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	var db *bolt.DB
	err := recoverCorrupt(path, func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout})
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			return fmt.Errorf("open database %s: %w: %w", path, ErrHeld, err)
		case err != nil:
			return classifyOpenError(path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &DB{db: db}, nil
}
