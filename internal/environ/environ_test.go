package environ

import (
	"slices"
	"testing"
)

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		name            string
		base, overrides []string
		want            []string
	}{
		{"empty", nil, nil, nil},
		{"append", []string{"A=1"}, []string{"B=2"}, []string{"A=1", "B=2"}},
		{"replace in place", []string{"A=1", "B=2", "C=3"}, []string{"B=x"}, []string{"A=1", "B=x", "C=3"}},
		{"empty value replaces", []string{"A=1"}, []string{"A="}, []string{"A="}},
		{"value with equals", []string{"A=1"}, []string{"A=b=c"}, []string{"A=b=c"}},
		{"bare name removes", []string{"A=1", "B=2"}, []string{"A"}, []string{"B=2"}},
		{"bare unknown name is dropped", []string{"A=1"}, []string{"Z"}, []string{"A=1"}},
		{"no name ignored", []string{"A=1"}, []string{"=x", ""}, []string{"A=1"}},
		{"first of duplicates replaced", []string{"A=1", "A=2"}, []string{"A=3"}, []string{"A=3", "A=2"}},
		{"bare name removes duplicates", []string{"A=1", "B=0", "A=2"}, []string{"A"}, []string{"B=0"}},
		{"later override wins", nil, []string{"A=1", "A=2"}, []string{"A=2"}},
		{"remove then set", []string{"A=1", "B=2"}, []string{"A", "A=3"}, []string{"B=2", "A=3"}},
		{"bare entry in base replaced", []string{"FLAG"}, []string{"FLAG=1"}, []string{"FLAG=1"}},
		{"prefix is another name", []string{"AB=1"}, []string{"A=2"}, []string{"AB=1", "A=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := slices.Clone(tc.base)
			got := Merge(tc.base, tc.overrides)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Merge(%q, %q) = %q, want %q", tc.base, tc.overrides, got, tc.want)
			}
			if !slices.Equal(tc.base, base) {
				t.Errorf("Merge changed base to %q", tc.base)
			}
		})
	}
}
