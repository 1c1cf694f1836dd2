package podns

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSysctlPath(t *testing.T) {
	for name, want := range map[string]string{
		"kernel.shmmax":                       "kernel/shmmax",
		"net.ipv4.conf.eth0/100.forwarding":   "net/ipv4/conf/eth0.100/forwarding",
		"net/ipv4/conf/eth0.100/forwarding":   "net/ipv4/conf/eth0.100/forwarding",
		"fs.mqueue.msg_max":                   "fs/mqueue/msg_max",
		"net.ipv4.ip_unprivileged_port_start": "net/ipv4/ip_unprivileged_port_start",
	} {
		if got, err := sysctlPath(name); err != nil || got != want {
			t.Errorf("sysctlPath(%q) = %q, %v, want %q", name, got, err, want)
		}
	}
	for _, bad := range []string{"", "net..x", "net/../kernel/x"} {
		if p, err := sysctlPath(bad); err == nil {
			t.Errorf("sysctlPath(%q) = %q, want an error", bad, p)
		}
	}
}

// Pin never writes a sysctl into a namespace it did not make: the host's
// IPC or UTS namespace, or (without a netns) the host's network.
func TestPinRefusesHostSysctls(t *testing.T) {
	for _, req := range []Request{
		{Sysctls: map[string]string{"kernel.shmmax": "1"}},
		{IPC: false, UTS: false, Sysctls: map[string]string{"kernel.domainname": "x"}},
		{Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}},
	} {
		dir := filepath.Join(t.TempDir(), "pod")
		if err := Pin(dir, req); err == nil {
			t.Errorf("Pin(%+v) succeeded", req)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("Pin(%+v) failed but left %s: %v", req, dir, err)
		}
	}
}

func TestStateAndRemove(t *testing.T) {
	root := t.TempDir()
	dir := Dir(root, "abc")
	if exists, _, err := State(dir); exists || err != nil {
		t.Errorf("State of a missing dir: %v, %v", exists, err)
	}
	// A pod that pins nothing (host network and IPC) has an empty dir:
	// running until Remove.
	if err := Pin(dir, Request{}); err != nil {
		t.Fatal(err)
	}
	if exists, mounted, err := State(dir); !exists || !mounted || err != nil {
		t.Errorf("State of an empty pin dir: %v, %v, %v", exists, mounted, err)
	}
	for range 2 {
		if err := Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
	if exists, _, _ := State(dir); exists {
		t.Error("dir left after Remove")
	}
}
