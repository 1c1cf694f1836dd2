package failpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
	}{
		{"", true},
		{"a=error", true},
		{"a=2*error, b=sleep(10ms)", true},
		{"a=kill", true},
		{"a", false},
		{"=error", false},
		{"a=explode", false},
		{"a=0*error", false},
		{"a=x*error", false},
		{"a=sleep(forever)", false},
	} {
		_, err := Parse(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("Parse(%q) err = %v, want ok=%v", tc.spec, err, tc.ok)
		}
	}
}

func TestHitCountsAndActions(t *testing.T) {
	ctx := context.Background()
	s, err := Parse("a=2*error,b=sleep(20ms)")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Hit(ctx, "a"); !errors.Is(err, errdefs.ErrInjected) {
			t.Fatalf("hit %d = %v, want injected", i, err)
		}
	}
	if err := s.Hit(ctx, "a"); err != nil {
		t.Fatalf("third hit = %v, want nil", err)
	}
	if err := s.Hit(ctx, "unknown"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Hit(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("sleep action did not sleep")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Hit(cctx, "b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep with cancelled ctx = %v", err)
	}
	var nilSet *Set
	if err := nilSet.Hit(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}
