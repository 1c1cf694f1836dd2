package image

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestSpaceReserve(t *testing.T) {
	ctx := context.Background()
	r := &spaceReserve{path: filepath.Join(t.TempDir(), "podbay-reserve"), size: 64 << 10}
	if r.release(ctx) {
		t.Error("release of a reserve never made reported space freed")
	}
	r.restore(ctx)
	st, err := os.Stat(r.path)
	if err != nil || st.Size() != r.size {
		t.Fatalf("reserve after restore: %v %v, want %d bytes", st, err, r.size)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Blocks*512 < r.size {
		t.Errorf("reserve has %d bytes allocated, want %d: not space held back", sys.Blocks*512, r.size)
	}
	if !r.release(ctx) {
		t.Error("release of a reserve reported nothing freed")
	}
	if _, err := os.Stat(r.path); !os.IsNotExist(err) {
		t.Errorf("reserve still there after release: %v", err)
	}
	r.restore(ctx)
	r.restore(ctx) // already there: kept
	if st, err := os.Stat(r.path); err != nil || st.Size() != r.size {
		t.Errorf("reserve after a second restore: %v %v", st, err)
	}
}
