package testimage

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
)

// libraryDirs are where sharedLibraries looks for a DT_NEEDED library, in
// order, after the directory of the binary's ELF interpreter. The
// multi-arch directories come first, as in Debian's loader.
func libraryDirs(triplet string) []string {
	var dirs []string
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}

// multiarchTriplet is Debian's multi-arch directory name for an ELF machine.
func multiarchTriplet(f *elf.File) string {
	switch f.Machine {
	case elf.EM_X86_64:
		return "x86_64-linux-gnu"
	case elf.EM_386:
		return "i386-linux-gnu"
	case elf.EM_AARCH64:
		return "aarch64-linux-gnu"
	case elf.EM_ARM:
		return "arm-linux-gnueabihf"
	case elf.EM_PPC64:
		return "powerpc64le-linux-gnu"
	case elf.EM_S390:
		return "s390x-linux-gnu"
	case elf.EM_RISCV:
		return "riscv64-linux-gnu"
	}
	return ""
}

// sharedLibraries returns what a dynamically linked binPath needs to run in
// an image that has nothing else: its ELF interpreter (at the path PT_INTERP
// names) and, transitively, every DT_NEEDED library, each at the host path
// the search found it under (/lib/x86_64-linux-gnu/libc.so.6), which is
// where the loader in the image looks too. A static binary needs none: nil.
//
// This lets a Builder use a dynamically linked busybox, such as Debian's
// busybox package, whose shell looks commands up in PATH rather than
// running its own applets first (see CritestImages).
func sharedLibraries(binPath string) ([]string, error) {
	f, err := elf.Open(binPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", binPath, err)
	}
	defer f.Close()
	interp, err := elfInterpreter(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", binPath, err)
	}
	if interp == "" {
		return nil, nil // static
	}
	if !path.IsAbs(interp) {
		return nil, fmt.Errorf("read %s: relative ELF interpreter %q", binPath, interp)
	}
	out := []string{path.Clean(interp)}
	dirs := append([]string{path.Dir(interp)}, libraryDirs(multiarchTriplet(f))...)

	// The loader is loaded already when a library names it as needed.
	seen := map[string]bool{path.Base(interp): true}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", binPath, err)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		if strings.Contains(name, "/") {
			return nil, fmt.Errorf("%s: needed library %q is a path, not a name", binPath, name)
		}
		p, err := findLibrary(name, dirs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", binPath, err)
		}
		out = append(out, p)
		more, err := neededLibraries(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", binPath, err)
		}
		queue = append(queue, more...)
	}
	return out, nil
}

// elfInterpreter returns the PT_INTERP path, or "" for a static binary.
func elfInterpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("read ELF interpreter: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// findLibrary returns the first dirs/name that is a regular file (after
// symlinks), as dir/name.
func findLibrary(name string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := path.Join(d, name)
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("find library %s: %w", name, err)
		}
		if fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("library %s not found in %s", name, strings.Join(dirs, ", "))
}

// neededLibraries returns a library's DT_NEEDED names.
func neededLibraries(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read library %s: %w", p, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read library %s: %w", p, err)
	}
	return libs, nil
}

// addSharedLibraries adds the files sharedLibraries lists for binPath to t,
// root-owned and 0755, as regular files with the content the host path
// resolves to.
func addSharedLibraries(t *tree, binPath string) error {
	libs, err := sharedLibraries(binPath)
	if err != nil {
		return err
	}
	for _, l := range libs {
		data, err := os.ReadFile(l)
		if err != nil {
			return fmt.Errorf("read library: %w", err)
		}
		name, err := cleanPath(l)
		if err != nil {
			return err
		}
		if err := t.file(name, data, 0o755, 0, 0); err != nil {
			return err
		}
	}
	return nil
}
