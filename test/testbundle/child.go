package testbundle

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// WaitForChild waits (10 s at most) until process pid has a child whose
// command line starts with prefix: a shell such as `trap … TERM; sleep
// 100 & wait` has then set its trap, and a SIGTERM sent earlier would be
// ignored by the PID 1 of a pid namespace.
func WaitForChild(t testing.TB, pid int, prefix string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, c := range strings.Fields(string(children)) {
			if cmdline, _ := os.ReadFile("/proc/" + c + "/cmdline"); strings.HasPrefix(string(cmdline), prefix) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d started no %s", pid, prefix)
		}
	}
}
