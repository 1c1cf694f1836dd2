package orphans

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A lost container is logged with the pod and container its spec names.
func TestOrphanFields(t *testing.T) {
	bundle := t.TempDir()
	spec := `{"annotations":{"io.kubernetes.cri.sandbox-name":"web","io.kubernetes.cri.sandbox-namespace":"shop","io.kubernetes.cri.container-name":"nginx"}}`
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []any{"pod_name", "web", "pod_namespace", "shop", "container_name", "nginx"}
	if got := orphanFields(bundle); !reflect.DeepEqual(got, want) {
		t.Errorf("orphanFields = %v, want %v", got, want)
	}
	if got := orphanFields(filepath.Join(bundle, "gone")); got != nil {
		t.Errorf("orphanFields of a missing bundle = %v, want none", got)
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		dir, path string
		want      bool
	}{
		{"/var/lib/podbay", "/var/lib/podbay/containers/x/bundle", true},
		{"/var/lib/podbay", "/var/lib/podbay", false},
		{"/var/lib/podbay", "/var/lib/podbay2/x", false},
		{"/var/lib/podbay", "/var/lib/other/x", false},
		{"/var/lib/podbay", "containers/x", false},
	} {
		if got := within(tc.dir, tc.path); got != tc.want {
			t.Errorf("within(%q, %q) = %v, want %v", tc.dir, tc.path, got, tc.want)
		}
	}
}
