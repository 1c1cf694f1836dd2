package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// Per-namespace policies (PolicyDir, CRI-O's signature_policy_dir): a pull
// for a pod of a namespace with a file there is held to it — refused with
// PermissionDenied naming the file, nothing stored —; one whose namespace
// has no file, or a pull without a pod, is held to the node's policy; a
// namespace that could name another file is InvalidArgument; a reload
// moves the directory.
func TestPolicyPerNamespace(t *testing.T) {
	reg := newRegistry(t)
	reg.push("app:1", simpleImage(t, "app"))
	dir := filepath.Join(t.TempDir(), "policies")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	reject := filepath.Join(dir, "locked.json")
	if err := os.WriteFile(reject, []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.PolicyDir = dir })
	e.insecure(reg.host)
	ctx := testCtx(t)
	ref := reg.ref("app:1")

	_, err := e.store.PullForNamespace(ctx, ref, nil, "locked")
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), reject) {
		t.Fatalf("pull for namespace locked: %v; want PermissionDenied naming %s", err, reject)
	}
	e.store.pullsDone.Wait()
	if images, layers := e.counts(); images != 0 || layers != 0 {
		t.Errorf("a refused pull stored %d images, %d layers", images, layers)
	}
	for _, ns := range []string{"../policies/locked", "Locked", "a/b", strings.Repeat("a", 64)} {
		if _, err := e.store.PullForNamespace(ctx, ref, nil, ns); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("pull for namespace %q: %v; want InvalidArgument", ns, err)
		}
	}
	for _, ns := range []string{"open", ""} {
		if _, err := e.store.PullForNamespace(ctx, ref, nil, ns); err != nil {
			t.Errorf("pull for namespace %q (no file: the node's policy, which accepts): %v", ns, err)
		}
		if err := e.store.Remove(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	// Without the directory the namespace's file is not read.
	e.store.SetRegistries(Registries{Conf: e.regConf, Policy: filepath.Join(e.root, "missing.json")})
	if _, err := e.store.PullForNamespace(ctx, ref, nil, "locked"); err != nil {
		t.Errorf("pull for namespace locked without a policy dir: %v", err)
	}
}
