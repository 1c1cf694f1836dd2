package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Miss is one thing a document or comment names that the tree lacks.
type Miss struct {
	File string // relative to the root, slash-separated
	Line int
	What string
}

func (m Miss) String() string { return fmt.Sprintf("%s:%d: %s", m.File, m.Line, m.What) }

// designDoc is the document whose package table must list every package.
const designDoc = "docs/design.md"

// tree is what the check knows of the repository.
type tree struct {
	root      string
	paths     map[string]bool // every file and directory, relative, slash-separated
	basenames map[string]bool // the base names of the files
	packages  []string        // the Go packages under internal/ and cmd/
	headings  map[string]*docHeadings
}

// skipDir says whether a directory is left out of the tree: VCS data,
// build output, and the tools module's downloads.
func skipDir(rel, name string) bool {
	return rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "bin" || name == "vendor" || name == "node_modules")
}

func load(root string) (*tree, error) {
	t := &tree{root: root, paths: map[string]bool{}, basenames: map[string]bool{}, headings: map[string]*docHeadings{}}
	pkgs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			t.paths[rel] = true
			return nil
		}
		t.paths[rel] = true
		t.basenames[d.Name()] = true
		if isPackageFile(rel) {
			pkgs[path.Dir(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for p := range pkgs {
		t.packages = append(t.packages, p)
	}
	slices.Sort(t.packages)
	return t, nil
}

// isPackageFile says whether rel is a non-test Go file of a package under
// internal/ or cmd/.
func isPackageFile(rel string) bool {
	if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || strings.Contains(rel, "/testdata/") {
		return false
	}
	return strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "cmd/")
}

// Check runs every check on the repository at root and returns the misses
// in file and line order.
func Check(root string) ([]Miss, error) {
	t, err := load(root)
	if err != nil {
		return nil, err
	}
	misses, err := t.checkPackageTable()
	if err != nil {
		return nil, err
	}
	texts, err := t.texts()
	if err != nil {
		return nil, err
	}
	for _, tx := range texts {
		misses = append(misses, t.checkText(tx)...)
	}
	slices.SortFunc(misses, func(a, b Miss) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return misses, nil
}

// tableName is one backquoted name in the first column of the package table.
var tableName = regexp.MustCompile("`([^`]+)`")

// checkPackageTable holds design.md's package table against the packages.
func (t *tree) checkPackageTable() ([]Miss, error) {
	b, err := os.ReadFile(filepath.Join(t.root, designDoc))
	if err != nil {
		return nil, err
	}
	var misses []Miss
	listed := map[string]bool{}
	in, found := false, false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| package |"):
			in, found = true, true
			continue
		case in && !strings.HasPrefix(line, "|"):
			in = false
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range tableName.FindAllStringSubmatch(cells[1], -1) {
			listed[m[1]] = true
			if !slices.Contains(t.packages, m[1]) {
				misses = append(misses, Miss{designDoc, i + 1, fmt.Sprintf("package table: %s is no package", m[1])})
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s has no package table (a line starting \"| package |\")", designDoc)
	}
	for _, p := range t.packages {
		if !listed[p] {
			misses = append(misses, Miss{designDoc, 1, fmt.Sprintf("package table: %s is missing", p)})
		}
	}
	return misses, nil
}

// text is a document, or one comment of a Go file, to check.
type text struct {
	file     string // relative to the root
	line     int    // the line text starts at
	body     string
	markdown bool
}

// texts are the documents (README.md, docs/*.md, the Makefile) and the
// comments of the module's Go files (tools/, a module of its own that
// builds the test programs, left out).
func (t *tree) texts() ([]text, error) {
	var out []text
	for _, p := range slices.Sorted(mapKeys(t.paths)) {
		switch {
		case p == "README.md" || (path.Dir(p) == "docs" && strings.HasSuffix(p, ".md")) || p == "Makefile":
			b, err := os.ReadFile(filepath.Join(t.root, p))
			if err != nil {
				return nil, err
			}
			out = append(out, text{file: p, line: 1, body: string(b), markdown: strings.HasSuffix(p, ".md")})
		case strings.HasSuffix(p, ".go") && !strings.HasPrefix(p, "tools/") && !strings.Contains(p, "/testdata/"):
			cs, err := goComments(filepath.Join(t.root, p), p)
			if err != nil {
				return nil, err
			}
			out = append(out, cs...)
		}
	}
	return out, nil
}

// goComments are the comment groups of the Go file at p.
func goComments(p, rel string) ([]text, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", rel, err)
	}
	var out []text
	for _, g := range f.Comments {
		out = append(out, text{file: rel, line: fset.Position(g.Pos()).Line, body: g.Text()})
	}
	return out, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var (
	// mdLink is a markdown link's target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// treePath is a path into the tree: one of its top-level directories,
	// then what follows up to a space, quote or closing bracket; not a
	// part of a longer path or URL.
	treePath = regexp.MustCompile("(?:^|[\\s`(\"'\\[,;])(?:\\./)?((?:internal|cmd|hack|docs|dist|test|tools)/[^\\s`)\"'\\],;:]*)")
	// bareFile is a file named without its directory.
	bareFile = regexp.MustCompile("(?:^|[\\s`(\"'\\[,;])([A-Za-z0-9_-]+\\.(?:go|md))(?:[\\s`)\"'\\],;:.#]|$)")
	// headingCite is a document followed by a quoted heading:
	// docs/design.md, "Undo rules" or docs/design.md ("Undo rules").
	headingCite = regexp.MustCompile(`([A-Za-z0-9_./-]*\.md),?\s*\(?["“]([^"”]{1,120})["”]`)
)

// checkText checks the paths, links and heading citations of tx.
func (t *tree) checkText(tx text) []Miss {
	var misses []Miss
	miss := func(off int, format string, args ...any) {
		line := tx.line + strings.Count(tx.body[:off], "\n")
		misses = append(misses, Miss{tx.file, line, fmt.Sprintf(format, args...)})
	}
	dir := path.Dir(tx.file)
	if tx.markdown {
		for _, m := range mdLink.FindAllStringSubmatchIndex(tx.body, -1) {
			target := tx.body[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			doc := tx.file
			if file != "" {
				doc = path.Join(dir, file)
				if !t.paths[doc] {
					miss(m[2], "link to %s: no such file", target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(doc, ".md") && !t.hasAnchor(doc, anchor) {
				miss(m[2], "link to %s: %s has no heading with anchor #%s", target, doc, anchor)
			}
		}
	}
	for _, m := range treePath.FindAllStringSubmatchIndex(tx.body, -1) {
		ref := tx.body[m[2]:m[3]]
		if othersPath(tx.body[:m[2]]) || !t.ours(ref) {
			continue
		}
		if p, ok := t.resolvePath(ref); !ok {
			miss(m[2], "%s: no such file or directory", p)
		}
	}
	for _, m := range bareFile.FindAllStringSubmatchIndex(tx.body, -1) {
		name := tx.body[m[2]:m[3]]
		if othersPath(tx.body[:m[2]]) || (tx.markdown && strings.HasSuffix(tx.body[:m[2]], "](")) {
			continue // another project's, or a link's target (checked above)
		}
		if strings.HasSuffix(name, ".md") {
			if t.resolveDoc(dir, name) == "" {
				miss(m[2], "%s: no such document", name)
			}
		} else if !t.basenames[name] {
			miss(m[2], "%s: no such file", name)
		}
	}
	for _, m := range headingCite.FindAllStringSubmatchIndex(tx.body, -1) {
		docName, heading := tx.body[m[2]:m[3]], strings.Join(strings.Fields(tx.body[m[4]:m[5]]), " ")
		doc := t.resolveDoc(dir, docName)
		if doc == "" {
			continue // a missing document is reported above
		}
		if !t.hasCitedHeading(doc, heading) {
			miss(m[4], "%s has no heading %q", doc, heading)
		}
	}
	return misses
}

// othersPath says whether the path after before is another project's:
// right after a possessive (containerd's internal/cri/io/logger.go,
// cri-tools' pkg/validate). A file of another project is named so, or by
// its path there (k8s.io/cri-client/pkg/remote_runtime.go), which is no
// path of this tree.
func othersPath(before string) bool {
	before = strings.TrimRight(before, "`(\"")
	return strings.HasSuffix(before, "'s ") || strings.HasSuffix(before, "’s ") || strings.HasSuffix(before, "' ")
}

// ours says whether ref is a path of this tree to check. test/ and tools/
// are also the names of other projects' directories (Kubernetes'
// test/e2e_node) and the first part of image names (test/busybox): a path
// under them is this tree's only when its second part is.
func (t *tree) ours(ref string) bool {
	top, rest, _ := strings.Cut(ref, "/")
	if top != "test" && top != "tools" {
		return true
	}
	second, _, _ := strings.Cut(rest, "/")
	second, _, _ = strings.Cut(second, "#")
	return rest == "" || (second != "" && t.paths[top+"/"+strings.TrimRight(second, ".")])
}

// resolvePath cleans a path found in a text (trailing punctuation, a Go
// package pattern's "/...", an identifier after a package: internal/image.Store)
// and says whether it is in the tree; a #anchor after a document must be
// one of its headings.
func (t *tree) resolvePath(ref string) (string, bool) {
	ref = strings.TrimRight(ref, ".")
	ref = strings.TrimSuffix(ref, "/...")
	ref, anchor, _ := strings.Cut(ref, "#")
	ref = strings.TrimSuffix(ref, "/")
	if strings.ContainsAny(ref, "<>*$") {
		return ref, true // a pattern or placeholder, not a path
	}
	if t.paths[ref] {
		if anchor != "" && strings.HasSuffix(ref, ".md") && !t.hasAnchor(ref, anchor) {
			return ref + "#" + anchor, false
		}
		return ref, true
	}
	if i := strings.LastIndex(ref, "."); i > 0 && t.paths[ref[:i]] && !strings.Contains(ref[i:], "/") {
		return ref, true // package.Identifier
	}
	return ref, false
}

// resolveDoc finds the document name refers to, relative to dir, then
// under docs/, then at the root; "" if there is none.
func (t *tree) resolveDoc(dir, name string) string {
	for _, p := range []string{path.Join(dir, name), path.Join("docs", name), name} {
		if t.paths[p] {
			return p
		}
	}
	return ""
}
