package nameindex

import (
	"fmt"
	"slices"
	"strings"

	"github.com/podbay/podbay/internal/errdefs"
)

// lookup finds the value whose ID is idOrPrefix, or the only one whose ID
// starts with it: the CRI's callers name records by a full ID or a unique
// prefix of one (crictl and the kubelet's logs show 13 characters). kind ("sandbox", "container") names the record in
// errors: an empty or ambiguous prefix is ErrInvalidArgument, no match
// ErrNotFound. The caller holds whatever lock guards m.
func lookup[T any](m map[string]T, idOrPrefix, kind string) (T, error) {
	var zero T
	if idOrPrefix == "" {
		return zero, fmt.Errorf("empty %s id: %w", kind, errdefs.ErrInvalidArgument)
	}
	if v, ok := m[idOrPrefix]; ok {
		return v, nil
	}
	var found T
	n := 0
	for id, v := range m {
		if strings.HasPrefix(id, idOrPrefix) {
			if n++; n > 1 {
				return zero, fmt.Errorf("%s id prefix %q is ambiguous: %w", kind, idOrPrefix, errdefs.ErrInvalidArgument)
			}
			found = v
		}
	}
	if n == 0 {
		return zero, fmt.Errorf("%s %q: %w", kind, idOrPrefix, errdefs.ErrNotFound)
	}
	return found, nil
}

// sorted returns m's values ordered by ID. The caller holds whatever lock
// guards m.
func sorted[T any](m map[string]T) []T {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]T, len(ids))
	for i, id := range ids {
		out[i] = m[id]
	}
	return out
}
