package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// docHeadings are the headings of one markdown document.
type docHeadings struct {
	anchors map[string]bool // GitHub's anchors, a repeated heading's with -1, -2, ...
	cited   map[string]bool // the anchors of the headings as cited: also without a trailing "(...)"
}

// heading is an ATX heading line.
var heading = regexp.MustCompile(`^#{1,6}[ \t]+(.*?)[ \t#]*$`)

// mdLinkText is a markdown link in a heading, which keeps only its text.
var mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// headingsOf reads doc's headings (outside fenced code blocks).
func (t *tree) headingsOf(doc string) *docHeadings {
	if h, ok := t.headings[doc]; ok {
		return h
	}
	h := &docHeadings{anchors: map[string]bool{}, cited: map[string]bool{}}
	t.headings[doc] = h
	b, err := os.ReadFile(filepath.Join(t.root, doc))
	if err != nil {
		return h
	}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := Anchor(m[1])
		if n := seen[a]; n > 0 {
			h.anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			h.anchors[a] = true
		}
		seen[a]++
		h.cited[a] = true
		if i := strings.LastIndex(m[1], " ("); i > 0 && strings.HasSuffix(m[1], ")") {
			h.cited[Anchor(m[1][:i])] = true
		}
	}
	return h
}

// hasAnchor says whether doc has a heading with the anchor.
func (t *tree) hasAnchor(doc, anchor string) bool { return t.headingsOf(doc).anchors[anchor] }

// hasCitedHeading says whether doc has the heading a text cites by name:
// the same words (GitHub's anchor of both is compared, so case and
// punctuation do not matter), or those before a trailing parenthesis.
func (t *tree) hasCitedHeading(doc, name string) bool {
	return t.headingsOf(doc).cited[Anchor(name)]
}

// Anchor is GitHub's anchor of a heading: its text lower-cased, links
// reduced to their text, every character but letters, digits, '-', '_' and
// spaces dropped, and the spaces made hyphens.
func Anchor(h string) string {
	h = mdLinkText.ReplaceAllString(strings.TrimSpace(h), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
