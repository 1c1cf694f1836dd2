package container

import (
	"encoding/json"
	"testing"
)

// The index itself is tested in nameindex; this is what container adds.
func TestIndexInSandbox(t *testing.T) {
	x := NewIndex()
	p, _, _ := x.Reserve("k8s_web")
	x.Finish("k8s_web", p, New(Record{ID: "aaa111", Name: "k8s_web", SandboxID: "sb1"}), nil)
	x.Add("k8s_db", New(Record{ID: "aab222", Name: "k8s_db", SandboxID: "sb2"}))
	x.Add("k8s_log", New(Record{ID: "aac333", Name: "k8s_log", SandboxID: "sb1"}))
	got := x.InSandbox("sb1")
	if len(got) != 2 || got[0].ID != "aaa111" || got[1].ID != "aac333" {
		t.Fatalf("InSandbox(sb1) = %v", got)
	}
	if got := x.InSandbox("sb3"); len(got) != 0 {
		t.Fatalf("InSandbox(sb3) = %v", got)
	}
}

// A record written before bundles moved to the state dir names none: its
// bundle is the one in its dir.
func TestBundleDir(t *testing.T) {
	for _, tc := range []struct {
		name, json, want string
	}{
		{"new", `{"id":"a","dir":"/var/lib/podbay/containers/a","bundle":"/run/podbay/bundles/a"}`, "/run/podbay/bundles/a"},
		{"old", `{"id":"a","dir":"/var/lib/podbay/containers/a"}`, "/var/lib/podbay/containers/a/bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec Record
			if err := json.Unmarshal([]byte(tc.json), &rec); err != nil {
				t.Fatal(err)
			}
			if got := rec.BundleDir(); got != tc.want {
				t.Errorf("BundleDir() = %q, want %q", got, tc.want)
			}
		})
	}
}
