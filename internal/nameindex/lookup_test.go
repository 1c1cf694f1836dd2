package nameindex

import (
	"errors"
	"slices"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestLookup(t *testing.T) {
	m := map[string]int{"aaa111": 1, "aab222": 2, "bbb": 3}
	for _, tc := range []struct {
		q    string
		want int
		err  error
	}{
		{"aaa111", 1, nil}, {"aaa", 1, nil}, {"b", 3, nil},
		{"aa", 0, errdefs.ErrInvalidArgument}, {"", 0, errdefs.ErrInvalidArgument}, {"zzz", 0, errdefs.ErrNotFound},
	} {
		got, err := lookup(m, tc.q, "thing")
		if got != tc.want || (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("lookup(%q) = %d, %v; want %d, %v", tc.q, got, err, tc.want, tc.err)
		}
	}
	if got := sorted(m); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("sorted = %v", got)
	}
}
