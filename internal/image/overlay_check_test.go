package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// A graph root where overlay cannot work (here: on an overlay mount) is a
// clear error, not a silent switch to vfs.
func TestNewOverlayUnsupportedFilesystem(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(root, "merged")
	opts := "lowerdir=" + filepath.Join(root, "lower") + ",upperdir=" + filepath.Join(root, "upper") +
		",workdir=" + filepath.Join(root, "work")
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount overlay: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	s, err := New(testCtx(t), Config{
		StorageRoot: filepath.Join(merged, "graph"),
		RunRoot:     filepath.Join(root, "run"),
		PolicyPath:  filepath.Join(root, "policy.json"),
	})
	if err == nil {
		_, _ = s.store.Shutdown(true)
		t.Fatal("New on an overlay mount succeeded")
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("New = %v, want ErrFailedPrecondition", err)
	}
	t.Log(err)
	if mounts := mountsUnder(t, root); len(mounts) != 1 {
		t.Errorf("mounts under %s: %v", root, mounts)
	}
}
