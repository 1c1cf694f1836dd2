package server

import (
	"reflect"
	"testing"
)

func TestPassThrough(t *testing.T) {
	in := map[string]string{
		"io.katacontainers.config.hypervisor.path": "/evil",
		"io.katacontainers.config.agent.debug":     "true",
		"example.com/team":                         "a",
	}
	for _, tc := range []struct {
		name     string
		patterns []string
		want     map[string]string
	}{
		{"none", nil, map[string]string{}},
		{"all", []string{"*"}, in},
		{"one family", []string{"io.katacontainers.config.agent.*"}, map[string]string{"io.katacontainers.config.agent.debug": "true"}},
		{"exact", []string{"example.com/team"}, map[string]string{"example.com/team": "a"}},
		{"star crosses the slash", []string{"example.com*"}, map[string]string{"example.com/team": "a"}},
		{"class", []string{"example.[a-z]om/t?am"}, map[string]string{"example.com/team": "a"}},
	} {
		if got := passThrough(tc.patterns, in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
