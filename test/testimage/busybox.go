package testimage

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultBusybox is the static busybox a Builder copies unless told
// otherwise: Debian's busybox-static.
const DefaultBusybox = "/bin/busybox"

// DefaultPath is the PATH of the official busybox image; DefaultImages sets
// it on every busybox image. A Spec's Env is used as written, so a Spec
// that wants a PATH lists this or its own.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passwd and group follow the official busybox image, plus two test users
// and a supplementary group that both belong to.
const (
	passwd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
test:x:1000:1000:test:/home/test:/bin/sh
test2:x:1001:1001:test2:/home/test2:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
`
	group = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
test:x:1000:
test2:x:1001:
testextra:x:1100:test,test2
nogroup:x:65534:
`
)

// skeleton adds the directories and account files every busybox-shaped
// layer has, the stand-in included.
func skeleton(t *tree) error {
	dirs := []struct {
		name     string
		mode     fs.FileMode
		uid, gid int
	}{
		{"bin", 0o755, 0, 0},
		{"dev", 0o755, 0, 0},
		{"etc", 0o755, 0, 0},
		{"home", 0o755, 0, 0},
		{"home/test", 0o755, 1000, 1000},
		{"home/test2", 0o755, 1001, 1001},
		{"proc", 0o755, 0, 0},
		{"root", 0o700, 0, 0},
		{"sbin", 0o755, 0, 0},
		{"sys", 0o755, 0, 0},
		{"tmp", 0o777 | fs.ModeSticky, 0, 0},
		{"usr", 0o755, 0, 0},
		{"usr/bin", 0o755, 0, 0},
		{"usr/sbin", 0o755, 0, 0},
		{"var", 0o755, 0, 0},
		{"var/spool", 0o755, 0, 0},
		{"var/spool/mail", 0o755, 0, 0},
		{"var/www", 0o755, 33, 33},
	}
	for _, d := range dirs {
		if err := t.dir(d.name, fs.ModeDir|d.mode, d.uid, d.gid); err != nil {
			return err
		}
	}
	if err := t.file("etc/passwd", []byte(passwd), 0o644, 0, 0); err != nil {
		return err
	}
	return t.file("etc/group", []byte(group), 0o644, 0, 0)
}

// BusyboxLayer builds the busybox base layer from the static busybox at
// binPath (DefaultBusybox when empty), the way the official busybox image is
// laid out:
//
//   - /bin/busybox, and one hard link to it per applet that
//     `busybox --list-full` names: always in /bin, and also where --list-full
//     puts it (/sbin, /usr/bin, /usr/sbin). Hard links, not symlinks: a
//     runtime that masks /bin/ls with a bind mount must not mask busybox.
//   - /etc/passwd: root (0), www-data (33), nobody (65534), test (1000,
//     home /home/test), test2 (1001, home /home/test2) and the usual system
//     accounts. /etc/group: the same primary groups, nogroup (65534), and
//     testextra (1100) with members test and test2.
//   - /tmp (1777), /root (0700), /home, /var/www (owned by www-data), and the
//     empty mount points /dev, /proc and /sys. No /etc/hostname, /etc/hosts
//     or /etc/resolv.conf: the runtime provides those.
//
// A dynamically linked busybox (Debian's busybox package) also gets its ELF
// interpreter and shared libraries, at the paths its loader looks in
// (/lib64/ld-linux-x86-64.so.2, /lib/x86_64-linux-gnu/libc.so.6, ...); a
// static one gets nothing more.
//
// It runs binPath to list the applets, so the binary must run on this host.
// The layer is deterministic: the same binary gives the same digest.
func BusyboxLayer(ctx context.Context, binPath string) (v1.Layer, error) {
	if binPath == "" {
		binPath = DefaultBusybox
	}
	t, err := busyboxTree(ctx, binPath)
	if err != nil {
		return nil, err
	}
	l, err := treeLayer(t)
	if err != nil {
		return nil, fmt.Errorf("busybox layer: %w", err)
	}
	return l, nil
}

// busyboxTree is the content of BusyboxLayer.
func busyboxTree(ctx context.Context, binPath string) (*tree, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	applets, err := listApplets(ctx, binPath)
	if err != nil {
		return nil, err
	}
	t := newTree()
	if err := skeleton(t); err != nil {
		return nil, fmt.Errorf("busybox layer: %w", err)
	}
	if err := t.file("bin/busybox", bin, 0o755, 0, 0); err != nil {
		return nil, fmt.Errorf("busybox layer: %w", err)
	}
	for _, full := range applets {
		name := path.Base(full)
		links := []string{"bin/" + name}
		if dir := path.Dir(full); dir != "bin" && dir != "." {
			// A root-level applet (Debian lists "linuxrc") only gets its
			// /bin link.
			links = append(links, full)
		}
		for _, l := range links {
			if _, ok := t.entries[l]; ok {
				continue // bin/busybox itself, or a name listed twice
			}
			if err := t.hardlink(l, "bin/busybox", 0o755, 0, 0); err != nil {
				return nil, fmt.Errorf("busybox layer: %w", err)
			}
		}
	}
	if err := addSharedLibraries(t, binPath); err != nil {
		return nil, fmt.Errorf("busybox layer: %w", err)
	}
	if err := t.addParents(nil); err != nil {
		return nil, fmt.Errorf("busybox layer: %w", err)
	}
	return t, nil
}

// listApplets runs `busybox --list-full` and returns its cleaned, relative
// paths ("bin/ls", "usr/bin/[").
func listApplets(ctx context.Context, binPath string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %s --list-full: %w", binPath, err)
	}
	var applets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		p, err := cleanPath(line)
		if err != nil {
			return nil, fmt.Errorf("list busybox applets: %w", err)
		}
		applets = append(applets, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	for _, a := range applets {
		if path.Base(a) == "sh" {
			return applets, nil
		}
	}
	return nil, fmt.Errorf("list busybox applets: %s has no sh applet (%d applets)", binPath, len(applets))
}

// busyboxBinaryTree is a layer with /bin/busybox and nothing else (but
// the shared libraries of a dynamically linked one): the smallest layer that
// can run a command.
func busyboxBinaryTree(binPath string) (*tree, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	t := newTree()
	if err := t.dir("bin", fs.ModeDir|0o755, 0, 0); err != nil {
		return nil, err
	}
	if err := t.file("bin/busybox", bin, 0o755, 0, 0); err != nil {
		return nil, err
	}
	if err := addSharedLibraries(t, binPath); err != nil {
		return nil, err
	}
	if err := t.addParents(nil); err != nil {
		return nil, err
	}
	return t, nil
}

// standInTree replaces the busybox layer in images for a platform the host
// busybox cannot run on: the same skeleton, and a note instead of binaries.
// Such an image is a valid manifest that does not run.
func standInTree(p v1.Platform) (*tree, error) {
	t := newTree()
	if err := skeleton(t); err != nil {
		return nil, err
	}
	note := fmt.Sprintf("podbay testimage stand-in layer for %s: no binaries, this image does not run\n", platformString(p))
	if err := t.file("etc/testimage-stand-in", []byte(note), 0o644, 0, 0); err != nil {
		return nil, err
	}
	return t, nil
}

// elfArch returns the GOARCH name of the ELF binary at binPath.
func elfArch(binPath string) (string, error) {
	f, err := elf.Open(binPath)
	if err != nil {
		return "", fmt.Errorf("read busybox architecture: %w", err)
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_386:
		return "386", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_ARM:
		return "arm", nil
	case elf.EM_PPC64:
		if f.Data == elf.ELFDATA2LSB {
			return "ppc64le", nil
		}
		return "ppc64", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	case elf.EM_LOONGARCH:
		return "loong64", nil
	}
	return "", fmt.Errorf("read busybox architecture: %s: unsupported ELF machine %v", binPath, f.Machine)
}

// ShellPrefersApplets reports whether the shell of the busybox at binPath
// runs its own applets before looking in PATH (busybox's
// FEATURE_SH_STANDALONE, which Debian's busybox-static has and the
// official busybox image's busybox does not). Such a shell runs its ls
// applet for `sh -c ls` even when the runtime masks /bin/ls, so critest's
// MaskedPaths spec cannot pass with it.
func ShellPrefersApplets(ctx context.Context, binPath string) (bool, error) {
	if binPath == "" {
		binPath = DefaultBusybox
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// With no PATH to search, only an applet can answer to ls.
	cmd := exec.CommandContext(ctx, binPath, "sh", "-c", "command -v ls")
	cmd.Env = []string{"PATH=/nonexistent"}
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return strings.TrimSpace(string(out)) == "ls", nil
	case errors.As(err, &exitErr):
		return false, nil
	}
	return false, fmt.Errorf("run %s sh: %w", binPath, err)
}
