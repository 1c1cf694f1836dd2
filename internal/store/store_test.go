package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

type rec struct {
	Name string `json:"name"`
}

func TestPutGetDeleteReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("b", "k1", 1, rec{"one"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Put("b", "k2", 2, rec{"two"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var r rec
	v, err := db.Get("b", "k2", &r)
	if err != nil || v != 2 || r.Name != "two" {
		t.Fatalf("Get = %v %d %+v", err, v, r)
	}
	if err := db.Delete("b", "k2"); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete("b", "k2"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := db.Get("b", "k2", &r); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get deleted = %v, want not found", err)
	}
	if _, err := db.Get("nobucket", "k", &r); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get missing bucket = %v, want not found", err)
	}
}

func TestForEachQuarantinesBadRecords(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 4; i++ {
		if err := db.Put("b", fmt.Sprint(i), 1, rec{fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	bad, err := db.ForEach("b", func(r Record) error {
		if r.Key == "2" {
			return fmt.Errorf("cannot use it: %w", ErrBadRecord)
		}
		seen = append(seen, r.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || bad[0] != "2" || len(seen) != 3 {
		t.Fatalf("bad=%v seen=%v", bad, seen)
	}
	seen = nil
	if _, err := db.ForEach("b", func(r Record) error { seen = append(seen, r.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Fatalf("after quarantine seen=%v", seen)
	}
	var r rec
	if _, err := db.Get(quarantineBucket, "b/2", &r); err != nil || r.Name != "2" {
		t.Fatalf("quarantined record: %v %+v", err, r)
	}
}
