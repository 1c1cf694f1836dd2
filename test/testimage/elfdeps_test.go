package testimage

import (
	"archive/tar"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dynamicBinary is a dynamically linked program every Debian machine has:
// dash, the host's /bin/sh.
const dynamicBinary = "/bin/dash"

func needDynamicBinary(t *testing.T) {
	t.Helper()
	f, err := elf.Open(dynamicBinary)
	if err != nil {
		t.Skipf("no %s: %v", dynamicBinary, err)
	}
	defer f.Close()
	if interp, _ := elfInterpreter(f); interp == "" {
		t.Skipf("%s is linked statically", dynamicBinary)
	}
}

func TestSharedLibrariesStatic(t *testing.T) {
	needBusybox(t)
	libs, err := sharedLibraries(DefaultBusybox)
	if err != nil || libs != nil {
		t.Fatalf("static busybox: %v, %v; want none", libs, err)
	}
}

func TestSharedLibrariesDynamic(t *testing.T) {
	needDynamicBinary(t)
	libs, err := sharedLibraries(dynamicBinary)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) < 2 || !strings.HasPrefix(path.Base(libs[0]), "ld-") {
		t.Fatalf("libraries %v: want the ELF interpreter first, then libraries", libs)
	}
	if !slices.ContainsFunc(libs, func(l string) bool { return path.Base(l) == "libc.so.6" }) {
		t.Errorf("libraries %v: no libc.so.6", libs)
	}
	seen := map[string]bool{}
	for _, l := range libs {
		if !path.IsAbs(l) || path.Clean(l) != l {
			t.Errorf("library path %q is not absolute and clean", l)
		}
		if seen[path.Base(l)] {
			t.Errorf("library %s listed twice in %v", path.Base(l), libs)
		}
		seen[path.Base(l)] = true
		if fi, err := os.Stat(l); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("library %s: %v", l, err)
		}
	}
}

func TestSharedLibrariesErrors(t *testing.T) {
	if _, err := sharedLibraries(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("missing binary: no error")
	}
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := sharedLibraries(text); err == nil {
		t.Error("not an ELF file: no error")
	}
	if _, err := findLibrary("libpodbay-none.so.1", []string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing library: %v", err)
	}
}

// A dynamically linked binary gets its loader and libraries in the layer,
// and runs from it alone.
func TestBusyboxBinaryLayerDynamic(t *testing.T) {
	needDynamicBinary(t)
	a := mustBuild(t, NewBuilder(dynamicBinary), Spec{Repository: "test/dyn", Base: BaseBusyboxBinary})
	layers, err := a.Image.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v, %v", layers, err)
	}
	entries := readLayer(t, layers[0])
	m := byName(entries)
	libs, err := sharedLibraries(dynamicBinary)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range append(libs, "/bin/busybox") {
		e, ok := m[l[1:]]
		if !ok || e.hdr.Typeflag != tar.TypeReg || e.hdr.Mode != 0o755 {
			t.Errorf("%s: %+v", l, e.hdr)
		}
	}
	for _, dir := range []string{"bin", path.Dir(libs[0])[1:]} {
		if e, ok := m[dir]; !ok || e.hdr.Typeflag != tar.TypeDir {
			t.Errorf("no directory %s", dir)
		}
	}

	if os.Geteuid() != 0 {
		t.Skip("running the layer needs root (chroot)")
	}
	root := t.TempDir()
	for _, e := range entries {
		p := filepath.Join(root, e.hdr.Name)
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.WriteFile(p, e.data, os.FileMode(e.hdr.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// /bin/busybox is dash here.
	out, err := exec.CommandContext(context.Background(), "chroot", root, "/bin/busybox", "-c", "echo ran from the layer").CombinedOutput()
	if err != nil || string(out) != "ran from the layer\n" {
		t.Fatalf("chroot run: %v: %s", err, out)
	}
}

func TestShellPrefersApplets(t *testing.T) {
	dir := t.TempDir()
	// A fake busybox whose shell finds nothing without PATH.
	fake := filepath.Join(dir, "busybox")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if prefers, err := ShellPrefersApplets(context.Background(), fake); err != nil || prefers {
		t.Errorf("fake: %v, %v; want false", prefers, err)
	}
	if _, err := ShellPrefersApplets(context.Background(), filepath.Join(dir, "none")); err == nil {
		t.Error("missing binary: no error")
	}

	needBusybox(t)
	prefers, err := ShellPrefersApplets(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	// Debian's busybox-static is built with FEATURE_SH_STANDALONE.
	if !prefers {
		t.Logf("%s looks commands up in PATH first (not Debian's busybox-static?)", DefaultBusybox)
	}
}
