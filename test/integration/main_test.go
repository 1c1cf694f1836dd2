package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var (
	// binDir holds the binaries built by TestMain.
	binDir string
	// daemonBuildErr is why the daemon, CLI or pause program did not build;
	// the harness self-tests still run, every test that starts podbayd
	// fails with it.
	daemonBuildErr error
	// runcBuildErr is why runc (tools/, the release with idmapped mounts)
	// did not build; the tests that need it fail with it.
	runcBuildErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		// Every test skips itself; nothing to build.
		return m.Run()
	}
	if d := os.Getenv("PODBAY_ITEST_BINDIR"); d != "" {
		// Built beforehand, as below (a guest without Go).
		binDir = d
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
	if err := goBuild(root, dir, []string{"CGO_ENABLED=0"}, "./test/tools/podbay-failcni", "./test/tools/podbay-failruntime",
		"./test/tools/nri-logger", "./test/tools/nri-device-injector", "./test/tools/nri-adjuster", "./test/tools/podbay-syscallprobe"); err != nil {
		fmt.Fprintln(os.Stderr, "integration: build test tools:", err)
		return 1
	}
	if daemonBuildErr = buildDaemon(root, dir); daemonBuildErr != nil {
		fmt.Fprintln(os.Stderr, "integration: build:", daemonBuildErr)
	}
	if runcBuildErr = buildRunc(root, dir); runcBuildErr != nil {
		fmt.Fprintln(os.Stderr, "integration: build runc:", runcBuildErr)
	}
	binDir = dir
	return m.Run()
}

// buildDaemon builds the daemon, the CLI and the pause program into dir,
// and the daemon once more without the failpoints tag, as
// podbayd-nofailpoints. Everything is static (CGO_ENABLED=0): the pause
// program is copied into a root filesystem with no libc; so are the tools,
// which conmon and libcni run with arbitrary environments.
func buildDaemon(root, dir string) error {
	pkgs := []string{"./cmd/podbay", "./cmd/podbay-pause"}
	race := os.Getenv("PODBAY_ITEST_RACE") == "1"
	if !race {
		pkgs = append(pkgs, "./cmd/podbayd")
	}
	if err := goBuild(root, dir, []string{"CGO_ENABLED=0"}, pkgs...); err != nil {
		return err
	}
	untagged := filepath.Join(dir, "podbayd-nofailpoints")
	if err := goBuildTags(root, untagged, []string{"CGO_ENABLED=0"}, nil, "./cmd/podbayd"); err != nil {
		return err
	}
	if race {
		return goBuild(root, dir, []string{"CGO_ENABLED=1"}, "-race", "./cmd/podbayd")
	}
	return nil
}

// newRunc is the name in binDir of the runc TestMain builds from the
// tools/ module (a 1.2+ release: idmapped mounts, which Debian 12's runc
// 1.1.5 lacks).
const newRunc = "runc-tools"

// buildRunc builds runc from the tools/ module, as its Makefile does
// (cgo, libseccomp: Debian's libseccomp-dev, which make deps-test
// installs), without the libpathrs tag (a Rust library Debian 12 does not
// package): runc then resolves paths in Go, as every release before 1.4
// did.
func buildRunc(root, dir string) error {
	cmd := exec.Command("go", "build", "-tags", "seccomp urfave_cli_no_docs", "-o", filepath.Join(dir, newRunc), "github.com/opencontainers/runc")
	cmd.Dir = filepath.Join(root, "tools")
	// The tools module has no build tags: the main module's GOFLAGS
	// would name tags it does not have.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build runc: %v\n%s", err, b)
	}
	return nil
}

// goBuild builds into the directory out with the failpoints tag, so that
// podbayd arms PODBAY_FAILPOINTS.
func goBuild(root, out string, env []string, args ...string) error {
	return goBuildTags(root, out+"/", env, []string{"failpoints"}, args...)
}

// goBuildTags builds into out (a directory when it ends in "/") with tags
// added to those GOFLAGS names.
func goBuildTags(root, out string, env, tags []string, args ...string) error {
	flag, err := buildTags(root, tags...)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", append([]string{"build", flag, "-o", out}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %v\n%s", args, err, b)
	}
	return nil
}

// buildTags returns a -tags flag naming the tags GOFLAGS names plus more:
// a -tags flag on the command line replaces GOFLAGS' own, which keep the
// cgo-only storage back ends out of the build.
func buildTags(root string, more ...string) (string, error) {
	cmd := exec.Command("go", "env", "GOFLAGS")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOFLAGS: %w", err)
	}
	var tags []string
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimLeft(f, "-"), "tags="); ok && v != "" {
			tags = append(tags, strings.Split(v, ",")...)
		}
	}
	return "-tags=" + strings.Join(append(tags, more...), ","), nil
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
