package systemd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestManagerScopes runs where PID 1 is systemd (the Debian 12 test
// guest), as root: a process is put in a transient scope, the scope is
// stopped with the process killed, a broken connection is replaced, and
// unknown units count as stopped.
func TestManagerScopes(t *testing.T) {
	if !Booted() || os.Geteuid() != 0 {
		t.Skip("needs systemd as PID 1 and root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := NewManager(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	unit := fmt.Sprintf("podbay-test-%d.scope", cmd.Process.Pid)
	if err := m.StartScope(ctx, unit, "system.slice", cmd.Process.Pid, "podbay manager test"); err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if err != nil || !strings.Contains(string(cg), "0::/system.slice/"+unit) {
		t.Errorf("process cgroup %q, %v; want /system.slice/%s", cg, err, unit)
	}
	if st, err := m.UnitState(ctx, unit); err != nil || st != "active" {
		t.Errorf("UnitState = %q, %v", st, err)
	}

	// A broken bus: the next call reconnects.
	m.mu.Lock()
	m.conn.Close()
	m.mu.Unlock()
	if err := m.StopUnit(ctx, unit); err != nil {
		t.Fatalf("StopUnit after the connection broke: %v", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the scope's process survived StopUnit")
	}
	if st, err := m.UnitState(ctx, unit); err != nil || (st != "" && st != "inactive") {
		t.Errorf("after stop: UnitState = %q, %v", st, err)
	}
	if err := m.StopUnit(ctx, "podbay-never-was.scope"); err != nil {
		t.Errorf("StopUnit of an unknown unit: %v", err)
	}
}
