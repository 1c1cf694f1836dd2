package specgen

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// testRoot is a root filesystem of the shape busybox images have: /bin/sh
// a link to /bin/busybox, an absolute link that must resolve in the root.
func testRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "usr/bin", "etc", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]os.FileMode{"bin/busybox": 0o755, "etc/passwd": 0o644, "work/run": 0o700} {
		if err := os.WriteFile(filepath.Join(root, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"bin/sh":       "/bin/busybox",
		"usr/bin/env":  "../../bin/busybox",
		"bin/escape":   "../../../../../../usr/bin/env", // ".." stops at the root
		"bin/loop":     "/bin/loop",
		"bin/dangling": "/nowhere",
		"bin/data":     "/data/tool", // into a mount
		"leaky":        "/proc/self/fd/7",
		"bin/leaky":    "/proc/self/fd/7/../../../bin/sh",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCheckExecutable(t *testing.T) {
	root := testRoot(t)
	const path = "PATH=/usr/local/bin:/usr/bin:/bin"
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		cwd  string
		ok   bool
	}{
		{"in PATH through an absolute link", []string{"sh", "-c", "true"}, []string{path}, "/", true},
		{"in PATH through a relative link", []string{"env"}, []string{path}, "/", true},
		{"absolute path", []string{"/bin/busybox"}, nil, "/", true},
		{"link climbing out stays in the root", []string{"/bin/escape"}, nil, "/", true},
		{"relative to the working dir", []string{"./run"}, nil, "/work", true},
		{"relative PATH entry", []string{"sh"}, []string{"PATH=bin"}, "/", true},
		{"empty PATH entry is the working dir", []string{"run"}, []string{"PATH=/bin:"}, "/work", true},
		{"not in a relative PATH entry", []string{"sh"}, []string{"PATH=bin"}, "/work", false},
		{"under a mount", []string{"/data/tool"}, nil, "/", true},
		{"link into a mount", []string{"/bin/data"}, nil, "/", true},
		{"mounted PATH dir", []string{"tool"}, []string{"PATH=/data:/bin"}, "/", true},
		{"not in PATH", []string{"true"}, []string{path}, "/", false},
		{"missing absolute path", []string{"/nonexistent"}, []string{path}, "/", false},
		{"no PATH", []string{"sh"}, nil, "/", false},
		{"empty PATH", []string{"sh"}, []string{"PATH="}, "/", false},
		{"a directory", []string{"/bin"}, nil, "/", false},
		{"the root", []string{"/"}, nil, "/", false},
		{"not executable", []string{"/etc/passwd"}, nil, "/", false},
		{"through a file", []string{"/etc/passwd/x"}, nil, "/", false},
		{"dangling link", []string{"/bin/dangling"}, nil, "/", false},
		{"link loop", []string{"/bin/loop"}, nil, "/", false},
		{"relative, wrong working dir", []string{"./run"}, nil, "/", false},
		// CVE-2024-21626: the runtime's leaked descriptors.
		{"working dir under /proc/self/fd", []string{"sh"}, []string{path}, "/proc/self/fd/7", false},
		{"working dir climbing through /proc", []string{"sh"}, []string{path}, "/proc/self/fd/7/../../..", false},
		{"working dir linked into /proc", []string{"sh"}, []string{path}, "/leaky", false},
		{"working dir /proc itself", []string{"sh"}, []string{path}, "/proc", true},
		{"program under /proc/self/fd", []string{"/proc/self/fd/7/../../../bin/sh"}, nil, "/", false},
		{"program linked into /proc", []string{"/bin/leaky"}, nil, "/", false},
		{"program /proc/self/exe", []string{"/proc/self/exe"}, nil, "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &specs.Spec{
				Process: &specs.Process{Args: tc.args, Env: tc.env, Cwd: tc.cwd},
				Mounts:  []specs.Mount{{Destination: "/proc"}, {Destination: "/data/"}},
			}
			err := CheckExecutable(root, s)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
				t.Fatalf("CheckExecutable: %v, want ok=%v or an invalid argument", err, tc.ok)
			}
		})
	}
}
