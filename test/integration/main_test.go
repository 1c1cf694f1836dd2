package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var (
	// binDir holds the binaries built by TestMain.
	binDir string
	// daemonBuildErr is why the daemon, CLI or pause program did not build;
	// the harness self-tests still run, every test that starts podbayd
	// fails with it.
	daemonBuildErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		// Every test skips itself; nothing to build.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "pbbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	if err := goBuild(root, dir, []string{"CGO_ENABLED=0"}, "./test/tools/podbay-failcni", "./test/tools/podbay-failruntime"); err != nil {
		fmt.Fprintln(os.Stderr, "integration: build test tools:", err)
		return 1
	}
	if daemonBuildErr = buildDaemon(root, dir); daemonBuildErr != nil {
		fmt.Fprintln(os.Stderr, "integration: build:", daemonBuildErr)
	}
	binDir = dir
	return m.Run()
}

// buildDaemon builds the daemon, the CLI and the pause program into dir.
// Everything is static (CGO_ENABLED=0): the pause program is copied into a
// root filesystem with no libc; so are the tools, which conmon and libcni run
// with arbitrary environments.
func buildDaemon(root, dir string) error {
	pkgs := []string{"./cmd/podbay", "./cmd/podbay-pause"}
	race := os.Getenv("PODBAY_ITEST_RACE") == "1"
	if !race {
		pkgs = append(pkgs, "./cmd/podbayd")
	}
	if err := goBuild(root, dir, []string{"CGO_ENABLED=0"}, pkgs...); err != nil {
		return err
	}
	if race {
		return goBuild(root, dir, []string{"CGO_ENABLED=1"}, "-race", "./cmd/podbayd")
	}
	return nil
}

func goBuild(root, out string, env []string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out + "/"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %v\n%s", args, err, b)
	}
	return nil
}

// bin returns the path of a binary built by TestMain.
func bin(name string) string { return filepath.Join(binDir, name) }

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration tests need root")
	}
	if binDir == "" {
		t.Fatal("binaries were not built")
	}
}
