package objectid

import (
	"strings"
	"testing"
)

func TestIs(t *testing.T) {
	hex64 := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{hex64, true},
		{strings.ToUpper(hex64), false}, // podbay writes lower case only
		{hex64[:63], false},
		{hex64 + "0", false},
		{hex64[:63] + "g", false},
		{"", false},
		{"podbay-" + hex64[:57], false},
		{strings.Repeat("é", 32), false}, // 64 bytes, not 64 digits
	} {
		if got := Is(tc.s); got != tc.want {
			t.Errorf("Is(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestNew(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if !Is(a) || !Is(b) || a == b {
		t.Errorf("New = %q, %q: want two different IDs", a, b)
	}
}
