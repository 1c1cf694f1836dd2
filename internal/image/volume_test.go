package image

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestMountVolume(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "volume-content")

	mp, id, err := e.store.MountVolume(ctx, pauseRef, "c1")
	if err != nil {
		t.Fatalf("MountVolume: %v", err)
	}
	if id != img.ID {
		t.Errorf("MountVolume image ID = %s, want %s", id, img.ID)
	}
	if !isMounted(t, mp) {
		t.Fatalf("%s is not a mount point", mp)
	}
	opts := strings.Split(mountOptions(t, mp), ",")
	for _, want := range []string{"ro", "nosuid", "nodev"} {
		if !slices.Contains(opts, want) {
			t.Errorf("image volume mount options %v lack %s", opts, want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(mp, "pause")); err != nil || string(data) != "volume-content" {
		t.Errorf("/pause in the volume: %q, %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(mp, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write into the volume: %v, want EROFS", err)
	}

	// A second owner shares the mount; the image stays in use until the
	// last owner is released.
	mp2, _, err := e.store.MountVolume(ctx, img.ID, "c2")
	if err != nil || mp2 != mp {
		t.Fatalf("second MountVolume = %s, %v; want %s", mp2, err, mp)
	}
	if err := e.store.Remove(ctx, img.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Remove of a mounted image: %v, want ErrFailedPrecondition", err)
	}
	if err := e.store.ReleaseVolumes(ctx, "c1"); err != nil {
		t.Fatalf("ReleaseVolumes(c1): %v", err)
	}
	if !isMounted(t, mp) {
		t.Fatal("released by one owner of two, the volume was unmounted")
	}
	if err := e.store.Remove(ctx, pauseRef); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Remove by name of an image still mounted: %v, want ErrFailedPrecondition", err)
	}
	if err := e.store.ReleaseVolumes(ctx, "c2"); err != nil {
		t.Fatalf("ReleaseVolumes(c2): %v", err)
	}
	if isMounted(t, mp) {
		t.Fatal("volume still mounted after its last owner was released")
	}
	if err := e.store.ReleaseVolumes(ctx, "c2"); err != nil {
		t.Errorf("second ReleaseVolumes: %v", err)
	}
	if err := e.store.Remove(ctx, img.ID); err != nil {
		t.Fatalf("Remove after release: %v", err)
	}

	for _, ref := range []string{"example.com/missing:1", strings.Repeat("ab", 32)} {
		if _, _, err := e.store.MountVolume(ctx, ref, "c3"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("MountVolume(%s) = %v, want ErrNotFound", ref, err)
		}
	}
	if got := e.store.vols.layersOf("c3"); len(got) != 0 {
		t.Errorf("failed MountVolume left owner c3 on %v", got)
	}
}

// A daemon restart: the owners are forgotten; those the records declare
// again (HoldVolume) keep their mount, the others' is collected.
func TestCollectVolumes(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "x")

	mp, _, err := e.store.MountVolume(ctx, img.ID, "kept")
	if err != nil {
		t.Fatal(err)
	}
	e.store.vols = volumes{} // the restart
	if err := e.store.HoldVolume(ctx, img.ID, "kept"); err != nil {
		t.Fatalf("HoldVolume: %v", err)
	}
	if got, err := e.store.CollectVolumes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("CollectVolumes with a holder = %v, %v; want nothing", got, err)
	}
	if !isMounted(t, mp) {
		t.Fatal("CollectVolumes unmounted a held volume")
	}
	if err := e.store.Remove(ctx, img.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Remove of a held image: %v", err)
	}

	e.store.vols = volumes{} // a restart whose records no longer hold it
	got, err := e.store.CollectVolumes(ctx)
	if err != nil || !slices.Equal(got, []string{img.ID}) {
		t.Fatalf("CollectVolumes = %v, %v; want [%s]", got, err, img.ID)
	}
	if isMounted(t, mp) {
		t.Fatal("leaked image volume still mounted after CollectVolumes")
	}
	if n, err := e.store.store.Mounted(img.ID); err == nil && n != 0 {
		t.Errorf("mount count %d after CollectVolumes", n)
	}
	if err := e.store.HoldVolume(ctx, strings.Repeat("cd", 32), "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("HoldVolume of a missing image: %v", err)
	}
	if err := e.store.Remove(ctx, img.ID); err != nil {
		t.Fatalf("Remove: %v", err)
	}
}

// The mount count c/storage keeps does not decide: an owner that mounted
// the same image several times (a retried create) is released at once.
func TestMountVolumeRepeatedOwner(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "x")
	var mp string
	for range 3 {
		var err error
		if mp, _, err = e.store.MountVolume(ctx, img.ID, "c"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.ReleaseVolumes(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if isMounted(t, mp) {
		t.Fatal("volume still mounted after its only owner was released")
	}
}
