package shim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/podbay/podbay/internal/runtime"
)

// A shim that is gone before podbay reaches it: its start command made
// the socket (and the address file) but nothing listens on it any more,
// as when the shim is SIGKILLed right after its start, or its start
// command is killed before it starts the shim. The test binary stands for
// the shim binary.

const (
	// deadShimEnv names the socket the dead shim's start command makes.
	deadShimEnv = "PODBAY_SHIM_TEST_DEAD_SHIM"
	// deadShimCutEnv makes the start command fail after the address file.
	deadShimCutEnv = "PODBAY_SHIM_TEST_DEAD_SHIM_CUT"
)

// deadShimStart is the start command of a shim that dies at once: it
// binds the socket named by deadShimEnv and closes it, leaving the file,
// writes the address file and prints the address (or, with deadShimCutEnv,
// fails as a start command killed half way would).
func deadShimStart() int {
	path := os.Getenv(deadShimEnv)
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dead shim:", err)
		return 1
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	address := "unix://" + path
	if err := os.WriteFile(shimAddressFile, []byte(address), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "dead shim:", err)
		return 1
	}
	if os.Getenv(deadShimCutEnv) != "" {
		return 1
	}
	fmt.Print(address)
	return 0
}

// TestStartShimDeadShimSocketRemoved: a sandbox whose shim is gone before
// it is reached fails to start and leaves nothing, its socket included.
func TestStartShimDeadShimSocketRemoved(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  bool
	}{
		{"shim killed after its start", false},
		{"start command cut short", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "shim.sock")
			t.Setenv(deadShimEnv, sock)
			if tc.cut {
				t.Setenv(deadShimCutEnv, "1")
			}
			bundle := filepath.Join(dir, "bundle")
			if err := os.Mkdir(bundle, 0o700); err != nil {
				t.Fatal(err)
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			r, err := New(Config{Name: "deadshim", ShimPath: exe, StateDir: filepath.Join(dir, "state")})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()

			_, err = r.startShim(context.Background(), "sb", bundle, runtime.CreateOptions{})
			if err == nil {
				t.Fatal("startShim of a dead shim succeeded")
			}
			if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("dead shim's socket left: %v", err)
			}
			if _, err := os.Stat(r.podDir("sb")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("pod state left: %v", err)
			}
			for _, name := range []string{shimAddressFile, shimLogFifo} {
				if _, err := os.Lstat(filepath.Join(bundle, name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s left in the bundle: %v", name, err)
				}
			}
		})
	}
}
