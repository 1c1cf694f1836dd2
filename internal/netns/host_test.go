package netns

import (
	"context"
	"os"
	"slices"
	"testing"
)

// Host answers as the package functions do.
func TestHost(t *testing.T) {
	var h Host
	dir := t.TempDir()
	p := Path(dir, "abc")
	if err := os.WriteFile(p, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if ids, err := h.List(dir); err != nil || !slices.Equal(ids, []string{"abc"}) {
		t.Errorf("List = %v, %v", ids, err)
	}
	if m, err := h.IsMounted(p); err != nil || m {
		t.Errorf("IsMounted of a plain file = %v, %v", m, err)
	}
	if u, err := h.InUse(p); err != nil || u {
		t.Errorf("InUse of a plain file = %v, %v", u, err)
	}
	if _, err := h.Dial(context.Background(), p, "127.0.0.1:1"); err == nil {
		t.Error("Dial into a plain file succeeded")
	}
	t.Run("root", func(t *testing.T) {
		requireRoot(t) // unmount needs it even where nothing is mounted
		q := Path(dir, "def")
		if err := h.Pin(q); err != nil {
			t.Fatal(err)
		}
		if m, err := h.IsMounted(q); err != nil || !m {
			t.Errorf("IsMounted after Pin = %v, %v", m, err)
		}
		if err := h.Unmount(q); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := h.Remove(q); err != nil {
				t.Fatalf("Remove #%d: %v", i, err)
			}
		}
	})
}
