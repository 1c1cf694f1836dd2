package oci

import (
	"os"
	"testing"
)

func TestParentPID(t *testing.T) {
	if got, want := parentPID(os.Getpid()), os.Getppid(); got != want {
		t.Errorf("parentPID(self) = %d, want %d", got, want)
	}
	if got := parentPID(0); got != 0 {
		t.Errorf("parentPID(0) = %d, want 0", got)
	}
}

// openInit gives up (the caller then asks the runtime) for an ID without
// conmon's files.
func TestOpenInitWithoutFiles(t *testing.T) {
	dir := t.TempDir()
	r := &Runtime{cfg: Config{ExitDir: dir, SocketDir: dir, RuntimeRoot: dir}}
	if proc, _, _, ok := r.openInit("abc"); ok || proc != nil {
		t.Errorf("openInit of an unknown ID: ok %v, proc %v; want neither", ok, proc)
	}
}
