package procfs

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestProcessExited(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	p, err := OpenProcess(cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("OpenProcess: %v", err)
	}
	defer p.Close()
	if p.Exited() {
		t.Fatal("running process reported exited")
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: with a pidfd, a zombie counts as exited.
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return for a killed process")
	}
	if !p.Exited() {
		t.Error("killed process not reported exited")
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("Signal to an exited process: %v", err)
	}
	cmd.Wait()
}

func TestProcessWaitReturnsOnClose(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p, err := OpenProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("OpenProcess: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	time.Sleep(20 * time.Millisecond)
	p.Close()
	select {
	case err := <-waited:
		if err == nil {
			t.Error("Wait after Close returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
}

func TestOpenProcessGone(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if _, err := OpenProcess(pid); err == nil {
			t.Errorf("OpenProcess(%d) succeeded", pid)
		}
	}
}

func TestNsInit(t *testing.T) {
	for _, tc := range []struct {
		nspid string
		want  bool
	}{
		{"NSpid:\t4242\t1\n", true},
		{"NSpid:\t4242\t17\t1\n", true},
		{"NSpid:\t4242\t7\n", false}, // in a nested namespace, not its init
		{"NSpid:\t1\n", false},       // init of the namespace /proc shows
		{"NSpid:\t4242\n", false},
		{"", false},
	} {
		status := "Name:\tpause\nPid:\t4242\n" + tc.nspid + "NSsid:\t1\n"
		if got := nsInit([]byte(status)); got != tc.want {
			t.Errorf("nsInit(%q) = %v, want %v", tc.nspid, got, tc.want)
		}
	}
}

func TestProcessWaitDeadlineAndPresent(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p, err := OpenProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("OpenProcess: %v", err)
	}
	defer p.Close()
	start := time.Now()
	if p.WaitDeadline(start.Add(50 * time.Millisecond)) {
		t.Fatal("WaitDeadline reported a running process exited")
	}
	if d := time.Since(start); d < 40*time.Millisecond || d > 5*time.Second {
		t.Errorf("WaitDeadline returned after %v, want about 50ms", d)
	}
	if !p.Present() {
		t.Fatal("running process not present")
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !p.WaitDeadline(time.Now().Add(5 * time.Second)) {
		t.Fatal("WaitDeadline: killed process not exited")
	}
	// A zombie: exited, but still there to signal.
	if p.HasPidfd() && !p.Present() {
		t.Error("unreaped zombie not present")
	}
	cmd.Wait()
	if p.Present() {
		t.Error("reaped process still present")
	}
}
