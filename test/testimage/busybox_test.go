package testimage

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// needBusybox skips tests that copy the host busybox where there is none
// (hack/install-deps.sh installs busybox-static).
func needBusybox(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(DefaultBusybox); err != nil {
		t.Skipf("no %s (install busybox-static): %v", DefaultBusybox, err)
	}
}

func TestBusyboxLayerLayout(t *testing.T) {
	needBusybox(t)
	l, err := BusyboxLayer(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	entries := readLayer(t, l)
	m := byName(entries)

	bin, ok := m["bin/busybox"]
	if !ok || bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode != 0o755 {
		t.Fatalf("bin/busybox: %+v", bin.hdr)
	}
	host, err := os.ReadFile(DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if string(bin.data) != string(host) {
		t.Fatal("bin/busybox differs from the host's")
	}

	// Every applet is a hard link to bin/busybox in /bin, and also where
	// --list-full puts it.
	out, err := exec.Command(DefaultBusybox, "--list-full").Output()
	if err != nil {
		t.Fatal(err)
	}
	applets := strings.Fields(string(out))
	want := []string{"bin/sh", "bin/ls", "bin/sleep"}
	for _, a := range applets {
		want = append(want, "bin/"+path.Base(a))
		if path.Dir(a) != "." {
			want = append(want, a)
		}
	}
	for _, name := range want {
		if name == "bin/busybox" {
			continue
		}
		e, ok := m[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if e.hdr.Typeflag != tar.TypeLink || e.hdr.Linkname != "bin/busybox" {
			t.Errorf("%s: type %c link %q, want a hard link to bin/busybox", name, e.hdr.Typeflag, e.hdr.Linkname)
		}
	}
	seenBusybox := false
	for _, e := range entries {
		switch e.hdr.Typeflag {
		case tar.TypeSymlink:
			t.Errorf("%s is a symlink; the layer must have hard links only", e.hdr.Name)
		case tar.TypeLink:
			if !seenBusybox {
				t.Errorf("hard link %s precedes its target", e.hdr.Name)
			}
		}
		if e.hdr.Name == "bin/busybox" {
			seenBusybox = true
		}
		if e.hdr.ModTime.Unix() != Epoch {
			t.Errorf("%s: mtime %v, want the epoch", e.hdr.Name, e.hdr.ModTime)
		}
	}

	for name, mode := range map[string]int64{"tmp": 0o1777, "root": 0o700, "etc": 0o755, "home/test": 0o755} {
		e, ok := m[name]
		if !ok || e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode != mode {
			t.Errorf("%s: %+v, want a directory with mode %o", name, e.hdr, mode)
		}
	}
	if e := m["var/www"]; e.hdr == nil || e.hdr.Uid != 33 || e.hdr.Gid != 33 {
		t.Errorf("var/www not owned by www-data")
	}
	for _, absent := range []string{"etc/hostname", "etc/hosts", "etc/resolv.conf"} {
		if _, ok := m[absent]; ok {
			t.Errorf("layer has %s; the runtime provides it", absent)
		}
	}
	for file, lines := range map[string][]string{
		"etc/passwd": {"root:x:0:0:", "www-data:x:33:33:", "nobody:x:65534:65534:", "test:x:1000:1000:", "test2:x:1001:1001:"},
		"etc/group":  {"root:x:0:", "www-data:x:33:", "nogroup:x:65534:", "test:x:1000:", "testextra:x:1100:test,test2"},
	} {
		content := string(m[file].data)
		for _, l := range lines {
			if !strings.Contains(content, "\n"+l) && !strings.HasPrefix(content, l) {
				t.Errorf("%s lacks %q", file, l)
			}
		}
	}
}

func TestBusyboxLayerDeterministic(t *testing.T) {
	needBusybox(t)
	ctx := context.Background()
	l1, err := BusyboxLayer(ctx, DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := BusyboxLayer(ctx, DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l1.Digest()
	d2, _ := l2.Digest()
	id1, _ := l1.DiffID()
	id2, _ := l2.DiffID()
	if d1 != d2 || id1 != id2 {
		t.Fatalf("two builds: digest %s / %s, diffID %s / %s", d1, d2, id1, id2)
	}
}

func TestBusyboxLayerErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := BusyboxLayer(ctx, "/nonexistent/busybox"); err == nil {
		t.Error("missing binary: no error")
	}
	// A program that runs but lists no applets is not a busybox.
	if _, err := os.Stat("/bin/true"); err == nil {
		if _, err := BusyboxLayer(ctx, "/bin/true"); err == nil {
			t.Error("/bin/true taken for a busybox")
		}
	}
}
