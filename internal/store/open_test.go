package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/podbay/podbay/internal/log"
)

const pageSize = 4096

// fillDB writes n records of about 2 KiB, the size of a sandbox record,
// into a new database at path.
func fillDB(t testing.TB, path string, n int) {
	t.Helper()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pad := strings.Repeat("x", 2000)
	for i := 0; i < n; i++ {
		bucket := []string{"sandboxes", "containers"}[i%2]
		if err := db.Put(bucket, fmt.Sprintf("%064x", i), 1, rec{pad}); err != nil {
			t.Fatal(err)
		}
	}
}

func garbage(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(1)).Read(b)
	return b
}

// corruptRecords fills a database of 2 MiB, which the corruptions cut into.
const corruptRecords = 400

// corruptions damage a database file the way crashes and disks do.
var corruptions = []struct {
	name   string
	damage func(data []byte) []byte
}{
	{"truncated to half", func(d []byte) []byte { return d[:len(d)/2] }},
	{"truncated inside the meta pages", func(d []byte) []byte { return d[:100] }},
	{"truncated after the meta pages", func(d []byte) []byte { return d[:3*pageSize] }},
	// Pages past the new end are outside bbolt's memory map: reading one faults.
	{"truncated mid-file", func(d []byte) []byte { return d[:75*pageSize] }},
	{"zero-length", func(d []byte) []byte { return nil }},
	{"random garbage", func(d []byte) []byte { return garbage(len(d)) }},
	{"first pages overwritten", func(d []byte) []byte { copy(d, garbage(4*pageSize)); return d }},
	{"data pages overwritten", func(d []byte) []byte { copy(d[2*pageSize:], garbage(14*pageSize)); return d }},
	// Every page reads fine; only bbolt's consistency check sees it.
	{"page neither reachable nor free", leakPage},
}

// leakPage raises both meta pages' high-water mark by one page, with valid
// checksums, and appends that page: a page that is neither in use nor in
// the free list, which a later allocation would never reuse.
func leakPage(d []byte) []byte {
	d = append(d, make([]byte, pageSize)...)
	for _, off := range []int{0, pageSize} {
		meta := d[off+16 : off+16+64] // after the page header
		pgid := binary.LittleEndian.Uint64(meta[40:48])
		binary.LittleEndian.PutUint64(meta[40:48], pgid+1)
		h := fnv.New64a()
		h.Write(meta[:56])
		binary.LittleEndian.PutUint64(meta[56:64], h.Sum64())
	}
	return d
}

func writeDamaged(t *testing.T, path string, damage func([]byte) []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, damage(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func quarantinedFiles(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOpenReportsCorruptWithoutMovingIt(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "podbay.db")
			fillDB(t, path, corruptRecords)
			writeDamaged(t, path, c.damage)
			before, _ := os.ReadFile(path)

			db, err := Open(path)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded on a corrupt database")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) || len(quarantinedFiles(t, path)) != 0 {
				t.Fatal("Open changed or moved the corrupt file")
			}
		})
	}
}

func TestOpenOrQuarantineMovesCorruptAside(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "podbay.db")
			fillDB(t, path, corruptRecords)
			writeDamaged(t, path, c.damage)
			damaged, _ := os.ReadFile(path)
			var logs bytes.Buffer
			ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))

			db, err := OpenOrQuarantine(ctx, path)
			if err != nil {
				t.Fatalf("OpenOrQuarantine: %v", err)
			}
			defer db.Close()

			moved := quarantinedFiles(t, path)
			if len(moved) != 1 {
				t.Fatalf("quarantined files = %v, want one", moved)
			}
			if kept, _ := os.ReadFile(moved[0]); !bytes.Equal(kept, damaged) {
				t.Fatal("the quarantined file is not the corrupt database")
			}
			for _, b := range []string{"sandboxes", "containers"} {
				if keys, err := db.Keys(b); err != nil || len(keys) != 0 {
					t.Fatalf("fresh database %s = %v %v, want empty", b, keys, err)
				}
			}
			if err := db.Put("sandboxes", "new", 1, rec{"n"}); err != nil {
				t.Fatalf("fresh database not writable: %v", err)
			}
			line := logs.String()
			for _, want := range []string{"level=ERROR", "moved_to=" + moved[0], "reason=", "database corrupt"} {
				if !strings.Contains(line, want) {
					t.Errorf("log %q lacks %q", line, want)
				}
			}
		})
	}
}

func TestOpenOrQuarantineKeepsValidDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.db")
	fillDB(t, path, 1000)
	var logs bytes.Buffer
	ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
	for i := 0; i < 2; i++ { // twice: the first open must leave no mark behind
		db, err := OpenOrQuarantine(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := db.Keys("sandboxes")
		db.Close()
		if err != nil || len(keys) != 500 {
			t.Fatalf("sandboxes after reopen: %d keys, %v", len(keys), err)
		}
	}
	if m := quarantinedFiles(t, path); len(m) != 0 || logs.Len() != 0 {
		t.Fatalf("valid database quarantined: %v, log %q", m, logs.String())
	}
}

// A database held by another daemon is in use, not corrupt.
func TestOpenOrQuarantineLeavesLockedDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.db")
	fillDB(t, path, 10)
	holder, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	start := time.Now()
	type result struct {
		db  *DB
		err error
	}
	done := make(chan result)
	go func() {
		db, err := OpenOrQuarantine(context.Background(), path)
		done <- result{db, err}
	}()
	// Killed while it waits for the lock, the second daemon must leave no
	// mark that makes the next start quarantine the database.
	time.Sleep(lockTimeout / 2)
	if mark, err := os.ReadFile(path + ".opening"); err != nil || marked(mark) {
		t.Errorf("guard while waiting for the lock = %q %v, want no mark", mark, err)
	}
	r := <-done
	db, err := r.db, r.err
	if err == nil {
		db.Close()
		t.Fatal("opened a database held by another process")
	}
	if errors.Is(err, ErrCorrupt) || !errors.Is(err, berrors.ErrTimeout) {
		t.Fatalf("err = %v, want a lock timeout", err)
	}
	if d := time.Since(start); d > 3*lockTimeout {
		t.Fatalf("gave up after %v", d)
	}
	if m := quarantinedFiles(t, path); len(m) != 0 {
		t.Fatalf("locked database quarantined: %v", m)
	}
	if keys, err := holder.Keys("sandboxes"); err != nil || len(keys) != 5 {
		t.Fatalf("holder lost its records: %v %v", keys, err)
	}
}

// A daemon that died while checking the database (a fault bbolt raises in
// a goroutine of its own cannot be recovered) must not die again on restart.
func TestOpenOrQuarantineAfterAnOpenDied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.db")
	fillDB(t, path, 10)
	if err := os.WriteFile(path+".opening", []byte(guardMark), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	db, err := OpenOrQuarantine(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if m := quarantinedFiles(t, path); len(m) != 1 {
		t.Fatalf("quarantined files = %v, want one", m)
	}
	db, err = Open(path)
	if err != nil {
		t.Fatalf("reopen after quarantine: %v", err)
	}
	db.Close()
}

func TestClassifyOpenError(t *testing.T) {
	for _, c := range []struct {
		err     error
		corrupt bool
	}{
		{berrors.ErrTimeout, false},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, false},
		{syscall.EROFS, false},
		{fmt.Errorf("flock: %w", syscall.EIO), false},
		{berrors.ErrInvalid, true},
		{berrors.ErrChecksum, true},
		{berrors.ErrVersionMismatch, true},
		{errors.New("file size too small"), true},
	} {
		got := errors.Is(classifyOpenError("/db", c.err), ErrCorrupt)
		if got != c.corrupt {
			t.Errorf("classifyOpenError(%v) corrupt = %v, want %v", c.err, got, c.corrupt)
		}
	}
}

// BenchmarkOpen measures Open's full read and consistency check.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n, "records"), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "podbay.db")
			fillDB(b, path, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				db, err := Open(path)
				if err != nil {
					b.Fatal(err)
				}
				db.Close()
			}
		})
	}
}

// TestGuardClearedInPlace: a cleared mark keeps the guard file's block, so
// that setting it again needs no space on the file system.
func TestGuardClearedInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	content, err := os.ReadFile(path + ".opening")
	if err != nil {
		t.Fatal(err)
	}
	if len(content) != len(guardMark) || marked(content) {
		t.Errorf("guard after a clean open = %q, want %d zero bytes", content, len(guardMark))
	}
	for _, tc := range []struct {
		content string
		want    bool
	}{{"", false}, {"\x00\x00", false}, {guardMark, true}, {"check", true}} {
		if got := marked([]byte(tc.content)); got != tc.want {
			t.Errorf("marked(%q) = %v, want %v", tc.content, got, tc.want)
		}
	}
}
