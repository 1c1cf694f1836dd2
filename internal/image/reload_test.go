package image

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A reload points pulls at other registries.conf and policy.json files and
// pins another pause image.
func TestSetRegistriesAndPinned(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t, func(c *Config) { c.PinnedImages = []string{reg.ref("pause:3.10")} })
	ctx := testCtx(t)
	reg.push("pause:3.10", simpleImage(t, "pause"))
	reg.push("pause:3.11", simpleImage(t, "pause2"))
	// The env's registries.conf does not let the registry be reached over
	// plain HTTP: the pull fails until the reload names one that does.
	if _, err := e.store.Pull(ctx, reg.ref("pause:3.10"), nil); err == nil {
		t.Fatal("pull over plain HTTP succeeded without an insecure registry")
	}
	other := filepath.Join(e.root, "other-registries.conf")
	if err := os.WriteFile(other, []byte(fmt.Sprintf("[[registry]]\nlocation = %q\ninsecure = true\n", reg.host)), 0o644); err != nil {
		t.Fatal(err)
	}
	reject := filepath.Join(e.root, "reject.json")
	if err := os.WriteFile(reject, []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.store.SetRegistries(Registries{Conf: other, ConfDir: filepath.Join(e.root, "none.d"), Policy: reject})
	if _, err := e.store.Pull(ctx, reg.ref("pause:3.10"), nil); err == nil {
		t.Fatal("pull accepted by a policy that rejects everything")
	}
	e.store.SetRegistries(Registries{Conf: other, ConfDir: filepath.Join(e.root, "none.d"), Policy: filepath.Join(e.root, "missing.json")})
	old, err := e.store.Pull(ctx, reg.ref("pause:3.10"), nil)
	if err != nil {
		t.Fatalf("pull after SetRegistries: %v", err)
	}
	if !old.Pinned {
		t.Error("the configured pause image is not pinned")
	}

	if err := e.store.SetPinned([]string{reg.ref("pause:3.11")}); err != nil {
		t.Fatal(err)
	}
	cur, err := e.store.Pull(ctx, reg.ref("pause:3.11"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if old, err = e.store.Status(ctx, reg.ref("pause:3.10")); err != nil {
		t.Fatal(err)
	}
	if !cur.Pinned || old.Pinned {
		t.Errorf("after SetPinned: new pause pinned %v, old %v", cur.Pinned, old.Pinned)
	}
	if err := e.store.SetPinned([]string{"Not A Reference"}); err == nil {
		t.Error("SetPinned took an invalid reference")
	}
}
