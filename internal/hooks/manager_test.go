package hooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func writeHook(t *testing.T, dir, name, args, when string) {
	t.Helper()
	doc := `{"version":"1.0.0","hook":{"path":"/bin/sh","args":` + args + `},"when":` + when + `,"stages":["poststop"]}`
	if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// applied returns the first arg after "sh" of each poststop hook applied.
func applied(t *testing.T, m *Manager, c Container) string {
	t.Helper()
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"sh"}}}
	m.Apply(context.Background(), spec, c)
	if spec.Hooks == nil {
		return ""
	}
	var out []string
	for _, h := range spec.Hooks.Poststop {
		out = append(out, h.Args[1])
	}
	return strings.Join(out, ",")
}

func TestManagerPrecedenceOrderAndReload(t *testing.T) {
	base := t.TempDir()
	usr, etc := filepath.Join(base, "usr"), filepath.Join(base, "etc")
	if err := os.Mkdir(usr, 0o755); err != nil {
		t.Fatal(err)
	}
	// etc does not exist yet: New creates it, as CRI-O does.
	writeHook(t, usr, "10-b.json", `["sh","usr-b"]`, `{"always":true}`)
	writeHook(t, usr, "20-masked.json", `["sh","usr-masked"]`, `{"always":true}`)
	writeHook(t, usr, "05-A.json", `["sh","usr-A"]`, `{"always":true}`)
	writeHook(t, usr, "01-annotated.json", `["sh","annotated"]`, `{"annotations":{"^test$":"^yes$"}}`)
	if err := os.WriteFile(filepath.Join(usr, "30-broken.json"), []byte(`{"version":"1.0.0",`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(usr, "README"), []byte(`not a hook`), 0o644); err != nil {
		t.Fatal(err)
	}

	m, err := New(context.Background(), []string{usr, etc})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := os.Stat(etc); err != nil {
		t.Fatalf("missing hooks dir not created: %v", err)
	}
	if got := applied(t, m, Container{}); got != "usr-A,usr-b,usr-masked" {
		t.Fatalf("hooks = %q", got)
	}
	if got := applied(t, m, Container{Annotations: map[string]string{"test": "yes"}}); got != "annotated,usr-A,usr-b,usr-masked" {
		t.Fatalf("hooks with the annotation = %q", got)
	}

	// A later directory's same-named file masks the earlier one; an
	// invalid one does not (the earlier stays in force, as CRI-O).
	writeHook(t, etc, "20-masked.json", `["sh","etc-masked"]`, `{"always":true}`)
	writeHook(t, etc, "10-b.json", `["sh","etc-b"]`, `{"commands":["^nomatch$"]}`)
	if err := os.WriteFile(filepath.Join(etc, "05-A.json"), []byte(`{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{},"stages":["poststop"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := applied(t, m, Container{}); got != "usr-A,etc-masked" {
		t.Fatalf("hooks after adding to etc = %q", got)
	}

	// Removal brings the masked file back.
	if err := os.Remove(filepath.Join(etc, "20-masked.json")); err != nil {
		t.Fatal(err)
	}
	if got := applied(t, m, Container{}); got != "usr-A,usr-masked" {
		t.Fatalf("hooks after removing from etc = %q", got)
	}
	// A repaired broken file is picked up.
	writeHook(t, usr, "30-broken.json", `["sh","fixed"]`, `{"always":true}`)
	if got := applied(t, m, Container{}); got != "usr-A,usr-masked,fixed" {
		t.Fatalf("hooks after repairing = %q", got)
	}
}

func TestManagerReadsNothingWhenUnchanged(t *testing.T) {
	dir := t.TempDir()
	writeHook(t, dir, "a.json", `["sh","a"]`, `{"always":true}`)
	m, err := New(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	first := m.current(context.Background())
	if len(first) != 1 {
		t.Fatalf("hooks = %d", len(first))
	}
	// Unchanged: the same slice, not re-read.
	if second := m.current(context.Background()); &second[0] != &first[0] {
		t.Fatal("hooks re-read with no change")
	}
	writeHook(t, dir, "b.json", `["sh","b"]`, `{"always":true}`)
	if third := m.current(context.Background()); len(third) != 2 {
		t.Fatalf("hooks after a change = %d", len(third))
	}
}
