// Command docscheck checks that podbay's documents say only what the tree
// has: every package under internal/ and cmd/ has a row in
// docs/design.md's package table and every package the table names
// exists; every path under one of the tree's top-level directories
// (internal, cmd, hack, docs, dist, test, tools), and every Go file or
// document named without its directory, that README.md, docs/*.md, the
// Makefile and the Go comments name exists; and every heading they cite
// (a link to a document's anchor, or a document followed by a quoted
// heading: docs/design.md, "Undo rules") is a heading of that document, by
// GitHub's anchor rules. A file of another project is named after a
// possessive (containerd's internal/cri/io/logger.go) or by its path in
// that project (k8s.io/cri-client/pkg/remote_runtime.go). `make lint` runs it from the repository's root:
//
//	go run ./hack/docscheck
//
// It prints one line per miss, "file:line: what", and exits 1 when there
// is any.
package main

import (
	"fmt"
	"os"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	misses, err := Check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(2)
	}
	for _, m := range misses {
		fmt.Println(m)
	}
	if len(misses) > 0 {
		fmt.Fprintf(os.Stderr, "docscheck: %d misses\n", len(misses))
		os.Exit(1)
	}
}
