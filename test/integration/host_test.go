package integration

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podbay/podbay/test/internal/nsinfo"
)

// runCmd runs a host command and returns its trimmed combined output.
func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// ping sends one ICMP echo from the host; Debian's busybox-static provides
// ping where iputils is not installed.
func ping(ip string) error {
	if p, err := exec.LookPath("ping"); err == nil {
		_, err := runCmd(p, "-c1", "-W2", ip)
		return err
	}
	_, err := runCmd("busybox", "ping", "-c1", "-W2", ip)
	return err
}

// requirePing polls ping for a few seconds (the first echo may race ARP).
func requirePing(t *testing.T, ip string) {
	t.Helper()
	if err := eventually(10*time.Second, func() error { return ping(ip) }); err != nil {
		t.Fatalf("host cannot ping pod IP %s: %v", ip, err)
	}
}

// nsInode returns the inode of a namespace file (/proc/PID/ns/X or a pin).
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func iptablesSave(t *testing.T, table string) string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", table).Output()
	if err != nil {
		t.Fatalf("iptables-save -t %s: %v", table, err)
	}
	return string(out)
}

// ruleLines returns the -A lines of an iptables-save dump that contain every
// one of subs.
func ruleLines(dump string, subs ...string) []string {
	var out []string
lines:
	for _, line := range strings.Split(dump, "\n") {
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue lines
			}
		}
		out = append(out, line)
	}
	return out
}

// echoServer serves connections on l: it reads one line and writes it back
// prefixed with "echo:".
func echoServer(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
			buf := make([]byte, 256)
			n, err := c.Read(buf)
			if err != nil && err != io.EOF {
				return
			}
			c.Write(append([]byte("echo:"), buf[:n]...)) //nolint:errcheck
		}()
	}
}

// exchange connects to addr, sends msg and returns the reply.
func exchange(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	reply, err := io.ReadAll(c)
	if err != nil {
		return string(reply), err
	}
	return string(reply), nil
}

// requireExchange polls until a TCP exchange with addr succeeds.
func requireExchange(t *testing.T, addr, msg string) {
	t.Helper()
	var reply string
	err := eventually(10*time.Second, func() error {
		var err error
		reply, err = exchange(addr, msg)
		if err == nil && reply != "echo:"+msg {
			err = fmt.Errorf("reply %q, want %q", reply, "echo:"+msg)
		}
		return err
	})
	if err != nil {
		t.Fatalf("TCP exchange with %s: %v", addr, err)
	}
}

// listenInPod opens a TCP listener inside the pod's network namespace.
func listenInPod(t *testing.T, nsPath, addr string) net.Listener {
	t.Helper()
	l, err := nsinfo.Listen(nsPath, "tcp", addr)
	if err != nil {
		t.Fatalf("listen in %s: %v", nsPath, err)
	}
	return l
}

// readProcFile reads a file below /proc/PID/root, i.e. inside the pod's
// mount namespace.
func readProcFile(t *testing.T, pid int, path string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", pid, path))
	if err != nil {
		t.Fatalf("read %s in pid %d: %v", path, pid, err)
	}
	return string(data)
}

// waitGone polls until pid no longer runs.
func waitGone(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	if err := eventually(timeout, func() error {
		if pidAlive(pid) {
			return fmt.Errorf("pid %d still running", pid)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
