package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree makes a repository of files (path: content) under a temp dir.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const goodDesign = "# design\n\n## Undo rules\n\n## The sandbox controller (internal/a)\n\n" +
	"| package | owns |\n|---|---|\n| `internal/a`, `cmd/d` | a and d |\n\nsee [undo](#undo-rules).\n"

// base is a tree with nothing to report.
func base() map[string]string {
	return map[string]string{
		"docs/design.md":             goodDesign,
		"docs/testing.md":            "# Testing\n\n## Working on podbay\n\n```sh\n# not a heading\n```\n",
		"README.md":                  "See [testing](docs/testing.md#working-on-podbay) and docs/design.md, \"Undo rules\"; `internal/a/a.go`, a.go, `hack/x.sh`.\n",
		"Makefile":                   "# docs/design.md (\"The sandbox controller\")\nlint:\n",
		"hack/x.sh":                  "",
		"internal/a/a.go":            "// Package a; see docs/design.md, \"Undo\n// rules\", internal/a.Thing and ./internal/... and test/busybox:1.\npackage a\n",
		"internal/a/a_test.go":       "package a\n",
		"cmd/d/main.go":              "// Command d follows containerd's internal/cri/io/logger.go.\npackage main\n",
		"internal/a/testdata/x.go":   "package x\n",
		"test/integration/x_test.go": "// test/integration/x_test.go names itself.\npackage integration\n",
	}
}

func misses(t *testing.T, files map[string]string) []string {
	t.Helper()
	ms, err := Check(writeTree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.String())
	}
	return out
}

func TestCleanTree(t *testing.T) {
	if got := misses(t, base()); len(got) != 0 {
		t.Errorf("misses in a clean tree:\n%s", strings.Join(got, "\n"))
	}
}

// Each kind of drift is one miss, at its file and line.
func TestMisses(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(map[string]string)
		want []string
	}{
		{"package missing from the table", func(f map[string]string) { f["internal/b/b.go"] = "package b\n" },
			[]string{"docs/design.md:1: package table: internal/b is missing"}},
		{"table names no package", func(f map[string]string) {
			f["docs/design.md"] = strings.Replace(goodDesign, "`cmd/d` |", "`cmd/d`, `internal/gone` |", 1)
		}, []string{"docs/design.md:9: package table: internal/gone is no package", "docs/design.md:9: internal/gone: no such file or directory"}},
		{"path in a document", func(f map[string]string) { f["README.md"] += "and `hack/gone.sh`\n" },
			[]string{"README.md:2: hack/gone.sh: no such file or directory"}},
		{"bare Go file in a document", func(f map[string]string) { f["docs/testing.md"] += "in `gone.go`.\n" },
			[]string{"docs/testing.md:8: gone.go: no such file"}},
		{"path in a Go comment", func(f map[string]string) {
			f["internal/a/b.go"] = "package a\n\n// f is in\n// internal/a/gone.go.\nfunc f() {}\n"
		}, []string{"internal/a/b.go:4: internal/a/gone.go: no such file or directory"}},
		{"this tree's test directory", func(f map[string]string) { f["Makefile"] += "# test/integration/gone_test.go\n" },
			[]string{"Makefile:3: test/integration/gone_test.go: no such file or directory"}},
		{"link to a missing document", func(f map[string]string) { f["docs/testing.md"] += "[x](gone.md)\n" },
			[]string{"docs/testing.md:8: link to gone.md: no such file"}},
		{"link to a missing anchor", func(f map[string]string) { f["docs/testing.md"] += "[x](design.md#undo)\n" },
			[]string{"docs/testing.md:8: link to design.md#undo: docs/design.md has no heading with anchor #undo"}},
		{"in-page anchor", func(f map[string]string) { f["docs/testing.md"] += "[x](#not-a-heading)\n" },
			[]string{"docs/testing.md:8: link to #not-a-heading: docs/testing.md has no heading with anchor #not-a-heading"}},
		{"cited heading in a comment", func(f map[string]string) {
			f["cmd/d/main.go"] = "// Command d: see docs/design.md (\"Sandbox kinds\").\npackage main\n"
		}, []string{"cmd/d/main.go:1: docs/design.md has no heading \"Sandbox kinds\""}},
		{"cited heading in a document", func(f map[string]string) { f["README.md"] += "see design.md, \"Undo\"\n" },
			[]string{"README.md:2: docs/design.md has no heading \"Undo\""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files := base()
			tt.edit(files)
			got := misses(t, files)
			if !slices.Equal(got, tt.want) {
				t.Errorf("misses:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"Undo rules":           "undo-rules",
		"`oci`: conmon + runc": "oci-conmon--runc",
		"Testing on a real node (`make test-node`)": "testing-on-a-real-node-make-test-node",
		"Against containerd 2.4 and CRI-O":          "against-containerd-24-and-cri-o",
		"podbayd's memory":                          "podbayds-memory",
		"See [the guide](x.md)":                     "see-the-guide",
	} {
		if got := Anchor(h); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// A repeated heading's anchors are numbered, as GitHub numbers them.
func TestRepeatedHeadings(t *testing.T) {
	files := base()
	files["docs/testing.md"] += "\n## Results\n\n## Results\n\n[a](#results) [b](#results-1) [c](#results-2)\n"
	got := misses(t, files)
	if len(got) != 1 || !strings.Contains(got[0], "#results-2") {
		t.Errorf("misses %v, want only #results-2", got)
	}
}
