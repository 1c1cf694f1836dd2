package oci

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCmdlineHasCID(t *testing.T) {
	cmdline := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, tc := range []struct {
		name    string
		cmdline []byte
		id      string
		want    bool
	}{
		{name: "long flag", cmdline: cmdline("/usr/bin/conmon", "--api-version", "1", "--cid", "abc", "--cuuid", "abc"), id: "abc", want: true},
		{name: "short flag", cmdline: cmdline("/usr/bin/conmon", "-b", "/b", "-c", "abc"), id: "abc", want: true},
		{name: "other container", cmdline: cmdline("/usr/bin/conmon", "--cid", "abcd"), id: "abc"},
		{name: "id elsewhere", cmdline: cmdline("/usr/bin/conmon", "--name", "abc", "--cid", "x"), id: "abc"},
		{name: "flag last", cmdline: cmdline("/usr/bin/conmon", "--cid"), id: "abc"},
		{name: "zombie", cmdline: nil, id: "abc"},
	} {
		if got := cmdlineHasCID(tc.cmdline, tc.id); got != tc.want {
			t.Errorf("%s: cmdlineHasCID = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWaitUntil(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	n := 0
	if !waitUntil(ctx, time.Second, func() bool { n++; return n >= 3 }) {
		t.Fatal("waitUntil gave up on a condition that became true")
	}
	if waitUntil(ctx, 30*time.Millisecond, func() bool { return false }) {
		t.Fatal("waitUntil reported a false condition as true")
	}
	if waitUntil(ctx, 0, func() bool { return false }) {
		t.Fatal("waitUntil with no time reported true")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if waitUntil(cancelled, time.Hour, func() bool { return false }) {
		t.Fatal("waitUntil on a cancelled context reported true")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestMonitorPIDOfSelfIsNotConmon(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, conmonPidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test binary's command line has no --cid: a recycled pid must not
	// be taken for conmon.
	if pid := monitorPID(dir, "c1"); pid != 0 {
		t.Errorf("monitorPID = %d, want 0", pid)
	}
	if pid := monitorPID("", "c1"); pid != 0 {
		t.Errorf("monitorPID without bundle = %d", pid)
	}
	if !slices.Contains(bundleLeftovers, conmonPidFile) {
		t.Error("conmon.pid is not cleaned up")
	}
}

// TestAwaitMonitorWaitsForExit: a conmon inside its exit has lost its
// command line but is still a process (state R or D, PF_EXITING) until
// the kernel has freed its memory; awaitMonitor waits for it rather than
// taking it for gone. RemoveContainer answered while conmon was still
// exiting before (TestRemoveMeansGone caught it in CI).
func TestAwaitMonitorWaitsForExit(t *testing.T) {
	const id = "c1"
	// The stand-in is single-threaded, as conmon is (a Go helper's main
	// thread would be a zombie while another thread frees the memory),
	// and holds 256 MiB that the kernel frees after the command line is
	// gone. Its command line names the container: perl -e ... --cid c1.
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("no perl (Debian's perl-base is essential)")
	}
	cmd := exec.Command(perl, "-e", `$x = "a" x (256 << 20); $| = 1; print "ready\n"; sleep 600`, "--", "--cid", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("stand-in: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, conmonPidFile), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if !isMonitorOf(pid, id) {
		t.Fatal("the helper is not taken for the monitor of c1")
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Catch it inside its exit: command line gone, not yet a zombie.
	deadline := time.Now().Add(5 * time.Second)
	for isMonitorOf(pid, id) && time.Now().Before(deadline) {
	}
	if !exiting(pid) {
		t.Skip("the helper's exit was through before it could be seen; nothing to check")
	}
	if err := awaitMonitor(context.Background(), bundle, id); err != nil {
		t.Fatalf("awaitMonitor: %v", err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err) // not reaped before cmd.Wait
	}
	if s := string(stat); !strings.Contains(s[strings.LastIndexByte(s, ')'):], ") Z ") {
		t.Errorf("awaitMonitor returned while the monitor was still exiting: %s", s)
	}
}
