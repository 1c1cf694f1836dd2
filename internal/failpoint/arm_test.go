//go:build failpoints

package failpoint

import (
	"context"
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// TestFromEnvWithTag: a binary built with the failpoints tag arms what
// EnvVar names and refuses a spec that does not parse.
func TestFromEnvWithTag(t *testing.T) {
	t.Setenv(EnvVar, "run.cni=error")
	s, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Hit(context.Background(), "run.cni"); !errors.Is(err, errdefs.ErrInjected) {
		t.Fatalf("hit = %v, want injected", err)
	}
	t.Setenv(EnvVar, "not a spec")
	if _, err := FromEnv(); err == nil {
		t.Fatal("a bad spec parsed")
	}
}
