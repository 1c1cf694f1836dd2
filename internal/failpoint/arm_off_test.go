//go:build !failpoints

package failpoint

import (
	"context"
	"testing"
)

// TestFromEnvWithoutTag: a binary built without the failpoints tag ignores
// EnvVar, even one that would kill it or does not parse.
func TestFromEnvWithoutTag(t *testing.T) {
	for _, spec := range []string{"run.cni=error", "run.start=kill", "not a spec"} {
		t.Setenv(EnvVar, spec)
		s, err := FromEnv()
		if err != nil || s != nil {
			t.Fatalf("%s=%q: FromEnv() = %v, %v; want nil, nil", EnvVar, spec, s, err)
		}
		if err := s.Hit(context.Background(), "run.cni"); err != nil {
			t.Fatalf("%s=%q: hit = %v, want nothing", EnvVar, spec, err)
		}
	}
}
