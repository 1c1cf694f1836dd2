package network

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoopbackUp brings "lo" up in a real, fresh namespace, where it is
// down, and checks it with ip: up, and 127.0.0.1 there.
func TestLoopbackUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip(8) to make a namespace and look at it")
	}
	name := "podbay-lotest-" + filepath.Base(t.TempDir())
	if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command(ip, "netns", "delete", name).Run() })
	show := func() string {
		out, err := exec.Command(ip, "-n", name, "-o", "addr", "show", "dev", "lo").CombinedOutput()
		if err != nil {
			t.Fatalf("ip addr: %v: %s", err, out)
		}
		link, err := exec.Command(ip, "-n", name, "-o", "link", "show", "dev", "lo").CombinedOutput()
		if err != nil {
			t.Fatalf("ip link: %v: %s", err, link)
		}
		return string(out) + string(link)
	}
	if before := show(); strings.Contains(before, "127.0.0.1") {
		t.Fatalf("lo is up in a fresh namespace already: the test proves nothing:\n%s", before)
	}
	path := "/var/run/netns/" + name
	for range 2 { // the second time finds it up
		if err := loopbackUp(path); err != nil {
			t.Fatalf("loopbackUp: %v", err)
		}
	}
	after := show()
	if !strings.Contains(after, "127.0.0.1/8") || !strings.Contains(after, "<LOOPBACK,UP,LOWER_UP>") {
		t.Errorf("lo after loopbackUp:\n%s", after)
	}
	if err := loopbackUp(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("loopbackUp of a missing path succeeded")
	}
}
