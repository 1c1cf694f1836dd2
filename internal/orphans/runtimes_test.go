package orphans

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/podbay/podbay/internal/runtime"
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

// A runtime's container is podbay's when its bundle is under the root
// (records written before bundles moved) or the bundle root.
func TestListRuntimeContainersBundleRoots(t *testing.T) {
	rt := listFake{states: []runtime.State{
		{ID: "old", Bundle: "/var/lib/podbay/containers/old/bundle"},
		{ID: "new", Bundle: "/run/podbay/bundles/new"},
		{ID: "foreign", Bundle: "/run/containerd/io.containerd.runtime.v2.task/k8s.io/foreign"},
	}}
	h := Host{Root: "/var/lib/podbay", BundleRoot: "/run/podbay/bundles", Runtimes: map[string]runtime.Runtime{"runc": rt}}
	var got []string
	for _, st := range listRuntimeContainers(context.Background(), h)["runc"] {
		got = append(got, st.ID)
	}
	if want := []string{"old", "new"}; !reflect.DeepEqual(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
}

// listFake is a runtime that only lists.
type listFake struct {
	runtime.Runtime
	states []runtime.State
}

func (f listFake) ListContainers(context.Context) ([]runtime.State, error) { return f.states, nil }
