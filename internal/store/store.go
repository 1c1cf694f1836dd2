// Package store persists podbay's records in an embedded bbolt database.
// Every record is a JSON document inside a versioned envelope; a record that
// cannot be read is moved to a quarantine bucket rather than stopping the
// daemon from starting, and a database file that cannot be read as a whole
// is moved aside (see OpenOrQuarantine).
package store

import (
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/podbay/podbay/internal/errdefs"
)

const quarantineBucket = "quarantine"

// DB is an open database. Its methods are safe for concurrent use; each is
// one transaction, fsynced by bbolt before it returns.
type DB struct {
	db *bolt.DB
}

type envelope struct {
	Version int             `json:"version"`
	Data    json.RawMessage `json:"data"`
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// Put stores v under bucket/key with the given format version.
func (d *DB) Put(bucket, key string, version int, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	env, err := json.Marshal(envelope{Version: version, Data: data})
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), env)
	})
}

// Delete removes bucket/key. Deleting a missing key is not an error.
func (d *DB) Delete(bucket, key string) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(key))
	})
}

// Get decodes bucket/key into v and returns its version.
func (d *DB) Get(bucket, key string, v any) (int, error) {
	var raw []byte
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		if val := b.Get([]byte(key)); val != nil {
			raw = append([]byte(nil), val...)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if raw == nil {
		return 0, fmt.Errorf("%s/%s: %w", bucket, key, errdefs.ErrNotFound)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return 0, fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return env.Version, json.Unmarshal(env.Data, v)
}

// Keys lists the keys of bucket, without decoding the records.
func (d *DB) Keys(bucket string) ([]string, error) {
	var keys []string
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			keys = append(keys, string(k))
			return nil
		})
	})
	return keys, err
}

// Record is one stored document, as handed to a ForEach callback.
type Record struct {
	Key     string
	Version int
	Data    json.RawMessage
}

// ErrBadRecord, returned by a ForEach callback, quarantines the record.
var ErrBadRecord = errors.New("bad record")

// ForEach calls fn for every record in bucket. A record whose envelope does
// not decode, or for which fn returns an error wrapping ErrBadRecord, is
// moved to the quarantine bucket (key "<bucket>/<key>") and reported in the
// returned list; other errors from fn stop the walk.
func (d *DB) ForEach(bucket string, fn func(Record) error) (quarantined []string, err error) {
	var bad []string
	err = d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var env envelope
			if err := json.Unmarshal(v, &env); err != nil {
				bad = append(bad, string(k))
				return nil
			}
			err := fn(Record{Key: string(k), Version: env.Version, Data: append(json.RawMessage(nil), env.Data...)})
			if errors.Is(err, ErrBadRecord) {
				bad = append(bad, string(k))
				return nil
			}
			return err
		})
	})
	if err != nil || len(bad) == 0 {
		return nil, err
	}
	err = d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		q, err := tx.CreateBucketIfNotExists([]byte(quarantineBucket))
		if err != nil {
			return err
		}
		for _, k := range bad {
			if err := q.Put([]byte(bucket+"/"+k), b.Get([]byte(k))); err != nil {
				return err
			}
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	return bad, err
}
