package shim

import (
	"log/slog"
	"os"
	"testing"
)

// TestMain logs at debug level when SHIM_TEST_DEBUG is set: the package's
// own debug messages, and the shims' logs (they get -debug).
func TestMain(m *testing.M) {
	// The test binary also serves as the cut-short tests' runc wrapper
	// and "daemon" (see cutshort_test.go).
	if os.Getenv(fakeRuncEnv) != "" {
		os.Exit(fakeRunc(os.Args[1:]))
	}
	if os.Getenv(createHelperEnv) != "" {
		os.Exit(createHelper())
	}
	// And as the start command of a shim that dies at once
	// (deadstart_test.go).
	if os.Getenv(deadShimEnv) != "" {
		os.Exit(deadShimStart())
	}
	if os.Getenv("SHIM_TEST_DEBUG") != "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	os.Exit(m.Run())
}
