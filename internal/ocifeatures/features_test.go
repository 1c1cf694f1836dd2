package ocifeatures

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRunc115(t *testing.T) {
	b, err := os.ReadFile("testdata/runc-1.1.5.json")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	// Debian 12's runc 1.1.5 lists rro but has no idmapped mounts.
	if got := For(rt, Kernel{6, 18}); got != (Handler{RecursiveReadOnlyMounts: true}) {
		t.Errorf("runc 1.1.5 on 6.18: %+v", got)
	}
	if got := For(rt, Kernel{5, 11}); got != (Handler{}) {
		t.Errorf("runc 1.1.5 on 5.11 (no mount_setattr): %+v", got)
	}
}

func TestParseIDMap(t *testing.T) {
	b, err := os.ReadFile("testdata/runc-1.2-idmap.json")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !rt.IDMapMounts {
		t.Fatal("mountExtensions.idmap.enabled not read")
	}
	for _, tc := range []struct {
		k    Kernel
		want Handler
	}{
		{Kernel{6, 1}, Handler{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{Kernel{5, 19}, Handler{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{Kernel{5, 15}, Handler{RecursiveReadOnlyMounts: true}},
		{Kernel{5, 12}, Handler{RecursiveReadOnlyMounts: true}},
		{Kernel{4, 19}, Handler{}},
	} {
		if got := For(rt, tc.k); got != tc.want {
			t.Errorf("kernel %v: %+v, want %+v", tc.k, got, tc.want)
		}
	}
	// idmap enabled without user namespaces is no use.
	rt.Namespaces = []string{"mount", "pid"}
	if For(rt, Kernel{6, 1}).UserNamespaces {
		t.Error("user namespaces reported without the user namespace type")
	}
}

func TestParseEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want Runtime
	}{
		{`{}`, Runtime{}},
		{`{"linux": {"mountExtensions": {"idmap": {}}}}`, Runtime{}},
		{`{"linux": {"mountExtensions": {"idmap": {"enabled": false}}}}`, Runtime{}},
	} {
		got, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if got.IDMapMounts != tc.want.IDMapMounts || len(got.MountOptions) != 0 {
			t.Errorf("%s: %+v", tc.doc, got)
		}
	}
	if _, err := Parse([]byte("unknown command features\n")); err == nil {
		t.Error("crun 1.8's answer parsed")
	}
}

func TestParseKernel(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    Kernel
		bad     bool
	}{
		{"6.18.44-fc-v595", Kernel{6, 18}, false},
		{"5.10.0-28-amd64", Kernel{5, 10}, false},
		{"5.12", Kernel{5, 12}, false},
		{"4.19rc1", Kernel{4, 19}, false},
		{"6", Kernel{}, true},
		{"x.1", Kernel{}, true},
		{"6.y", Kernel{}, true},
	} {
		got, err := ParseKernel(tc.release)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%q: %v, %v", tc.release, got, err)
		}
	}
	if !(Kernel{5, 12}).AtLeast(5, 12) || (Kernel{5, 11}).AtLeast(5, 12) || !(Kernel{6, 0}).AtLeast(5, 12) || (Kernel{4, 20}).AtLeast(5, 12) {
		t.Error("AtLeast")
	}
}

// TestQuery runs fake runtimes: one that prints a features document, one
// that has no features command (crun 1.8).
func TestQuery(t *testing.T) {
	dir := t.TempDir()
	doc, err := os.ReadFile("testdata/runc-1.2-idmap.json")
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	script := "#!/bin/sh\n[ \"$1\" = features ] || exit 3\ncat <<'EOF'\n" + string(doc) + "EOF\n"
	if err := os.WriteFile(good, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := Query(context.Background(), good)
	if err != nil || !rt.IDMapMounts {
		t.Fatalf("good runtime: %+v, %v", rt, err)
	}
	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho unknown command $1 >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Query(context.Background(), old); err == nil || !strings.Contains(err.Error(), "unknown command features") {
		t.Fatalf("runtime without features: %v", err)
	}
	if _, err := Detect(context.Background(), old); err == nil {
		t.Fatal("Detect of a runtime without features succeeded")
	}
}
