package runtime

import (
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	for id, ok := range map[string]bool{
		"abc":                       true,
		"0123456789abcdef":          true,
		"k8s_POD_a-b.c+d":           true,
		"":                          false,
		".":                         false,
		"..":                        false,
		"a/b":                       false,
		"../x":                      false,
		"a b":                       false,
		strings.Repeat("f", 64):     true,
		"tab\t":                     false,
		"new\nline":                 false,
		"unicodé":                   false,
		"semi;colon":                false,
		"dots...are.fine.inside...": true,
	} {
		if err := ValidateID(id); (err == nil) != ok {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}
