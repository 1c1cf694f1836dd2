package oci

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/runtime"
)

func TestConmonLogPath(t *testing.T) {
	cmdline := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, tc := range []struct {
		name    string
		cmdline []byte
		want    string
	}{
		{name: "k8s-file", cmdline: cmdline("conmon", "--cid", "c1", "--log-path", "k8s-file:/var/log/pods/p/c/0.log", "--log-level", "warning"), want: "/var/log/pods/p/c/0.log"},
		{name: "no driver", cmdline: cmdline("conmon", "-l", "/logs/0.log"), want: "/logs/0.log"},
		{name: "equals", cmdline: cmdline("conmon", "--log-path=k8s-file:/logs/0.log"), want: "/logs/0.log"},
		{name: "none", cmdline: cmdline("conmon", "--log-path", "none")},
		{name: "journald then file", cmdline: cmdline("conmon", "--log-path", "journald:", "--log-path", "k8s-file:/l/0.log"), want: "/l/0.log"},
		{name: "flag last", cmdline: cmdline("conmon", "--log-path")},
		{name: "zombie", cmdline: nil},
	} {
		if got := conmonLogPath(tc.cmdline); got != tc.want {
			t.Errorf("%s: conmonLogPath = %q, want %q", tc.name, got, tc.want)
		}
	}
	// What Create gives conmon comes back.
	for _, logPath := range []string{"", "/var/log/pods/ns_pod_uid/c/0.log"} {
		args := conmonArgs(Config{ConmonLogLevel: "warning"}, runtime.CreateOptions{ID: "c1", BundleDir: "/b", LogPath: logPath})
		if got := conmonLogPath(cmdline(append([]string{"/usr/bin/conmon"}, args...)...)); got != logPath {
			t.Errorf("conmonLogPath of conmonArgs with %q = %q", logPath, got)
		}
	}
}

func TestWriteCtl(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, ctlFile)
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// No reader: conmon is gone. The write must fail at once, not block.
	if err := writeCtl(fifo, ctlReopenLogMsg); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("writeCtl without a reader = %v, want ENXIO", err)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := writeCtl(fifo, ctlReopenLogMsg); err != nil {
		t.Fatalf("writeCtl: %v", err)
	}
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "2 0 0\n" {
		t.Errorf("conmon would read %q, %v", buf[:n], err)
	}

	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeCtl(regular, ctlReopenLogMsg); err == nil {
		t.Error("writeCtl to a regular file succeeded")
	}
	if err := writeCtl(filepath.Join(dir, "missing"), ctlReopenLogMsg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("writeCtl to a missing file = %v", err)
	}
}
