package orphans

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// subdirs lists the pod IDs under the pin and shm roots: directories only,
// and none for a root not made yet.
func TestSubdirs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"abc", "def"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := subdirs(root)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"abc", "def"}) {
		t.Errorf("subdirs = %v, %v; want [abc def]", ids, err)
	}
	if ids, err := subdirs(filepath.Join(root, "missing")); err != nil || ids != nil {
		t.Errorf("subdirs of a missing root = %v, %v; want none", ids, err)
	}
}
