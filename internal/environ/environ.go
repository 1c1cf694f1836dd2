// Package environ edits process environments: lists of "NAME=value".
package environ

import "strings"

// Merge returns base with overrides applied in order, as containerd and
// CRI-O layer a container's and an exec's environment: "NAME=value"
// replaces the first entry named NAME in place, or is appended; a bare
// "NAME" removes every entry so named; an entry without a name is
// ignored. Replacing the first entry matters when base repeats a name:
// the C library's getenv returns the first. base is not modified.
func Merge(base, overrides []string) []string {
	out := append([]string(nil), base...)
	for _, kv := range overrides {
		name, _, assigns := strings.Cut(kv, "=")
		switch i := index(out, name); {
		case name == "":
		case !assigns:
			out = remove(out, name)
		case i >= 0:
			out[i] = kv
		default:
			out = append(out, kv)
		}
	}
	return out
}

// index returns the position of the first entry named name, or -1.
func index(env []string, name string) int {
	for i, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); n == name {
			return i
		}
	}
	return -1
}

// remove drops every entry named name.
func remove(env []string, name string) []string {
	out := env[:0]
	for _, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); n != name {
			out = append(out, kv)
		}
	}
	return out
}
