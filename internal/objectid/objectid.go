// Package objectid owns the shape of the IDs podbay gives its pods and
// containers: 64 lower-case hex digits, random. Whatever podbay finds on
// the host (a network namespace, a directory, a CNI plugin's
// CNI_CONTAINERID, a process argument) is taken for podbay's only if it
// has that shape, so that garbage collection and the leak scans never
// touch something another tool named podbay-something.
package objectid

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Len is the length of an ID.
const Len = 64

// New returns a fresh random ID.
func New() (string, error) {
	b := make([]byte, Len/2)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Is reports whether s has the shape of an ID: 64 lower-case hex digits.
func Is(s string) bool {
	if len(s) != Len {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
