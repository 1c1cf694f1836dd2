package image

import (
	"errors"
	"sync"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// TestRemoveVanished: an image that resolved but was deleted by another
// removal before its own delete ran is removed, not an error (critest
// v1.37's "should not fail on simultaneous RemoveImage calls").
func TestRemoveVanished(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	reg.push("test/vanish:1", simpleImage(t, "vanish"))
	ref := reg.ref("test/vanish:1")
	img, err := e.store.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.store.resolve(img.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Remove(ctx, img.ID); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	// The loser of the race: resolved before the winner deleted it.
	if err := e.store.deleteImage(m.img.ID); err != nil {
		t.Errorf("delete of an image removed meanwhile = %v, want nil", err)
	}
	if err := e.store.Remove(ctx, img.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Remove of an unknown image = %v, want ErrNotFound", err)
	}
}

// TestRemoveConcurrent: N removals of one image at once each remove it
// (nil) or, resolving after it went, find nothing (ErrNotFound, which the
// CRI server answers as success); none fails otherwise, and the image and
// its layers are gone.
func TestRemoveConcurrent(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	reg.push("test/concurrent:1", simpleImage(t, "concurrent"))
	ref := reg.ref("test/concurrent:1")
	const n = 8
	for round := range 5 {
		img, err := e.store.Pull(ctx, ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = e.store.Remove(ctx, img.ID)
			})
		}
		close(start)
		wg.Wait()
		removed := 0
		for i, err := range errs {
			switch {
			case err == nil:
				removed++
			case errors.Is(err, errdefs.ErrNotFound):
			default:
				t.Errorf("round %d: Remove %d: %v", round, i, err)
			}
		}
		if removed == 0 {
			t.Errorf("round %d: no Remove succeeded", round)
		}
		if images, layers := e.counts(); images != 0 || layers != 0 {
			t.Fatalf("round %d: %d images, %d layers left", round, images, layers)
		}
	}
}
