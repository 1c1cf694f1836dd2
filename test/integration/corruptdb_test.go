package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCorruptDatabaseQuarantined: a daemon killed with a pod running
// restarts on a database whose first pages are garbage (a torn write on a
// file system that lost it). It moves the file aside, serves with no pods,
// and its garbage collection takes back everything the lost pod held, so
// that the kubelet can recreate it on a clean node.
func TestCorruptDatabaseQuarantined(t *testing.T) {
	e, ti := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "lost")
	ctr, ctrPid := e.runContainer(t, pod, containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	_, podInfo := e.status(t, pod.id)

	// A second daemon on the same root finds the database held, not
	// corrupt: it fails and moves nothing.
	requireSecondDaemonRefused(t, e)

	e.kill9()
	dbPath := filepath.Join(e.rootDir, "podbay.db")
	damaged := overwriteStart(t, dbPath, 4*4096)

	e.start("")

	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("after restart on a corrupt database List has %v, want none", podIDs(pods))
	}
	if ctrs := e.listContainers(t, nil); len(ctrs) != 0 {
		t.Errorf("after restart on a corrupt database ListContainers has %v, want none", containerIDs(ctrs))
	}
	moved, _ := filepath.Glob(dbPath + ".corrupt-*")
	if len(moved) != 1 {
		t.Fatalf("quarantined databases %v, want one", moved)
	}
	if kept, err := os.ReadFile(moved[0]); err != nil || !bytes.Equal(kept, damaged) {
		t.Errorf("%s is not the corrupt database (%v)", moved[0], err)
	}
	if log, _ := os.ReadFile(e.logPath); !strings.Contains(string(log), "level=ERROR msg=\"database is corrupt") {
		t.Errorf("no error-level log of the quarantine:\n%s", e.logTail(30))
	}

	// Everything of the lost pod is reclaimed: processes, namespace, veth,
	// IP, CNI cache, mounts, root filesystems, runtime state.
	e.eventuallyNoLeaks(t, 30*time.Second)
	for _, pid := range []int{podInfo.Pid, ctrPid} {
		if pidAlive(pid) {
			t.Errorf("process %d of the lost pod still runs", pid)
		}
	}

	// The kubelet's retry of the same pod gets a clean one.
	again := e.runTestPod(t, "lost")
	id, _ := e.runContainer(t, again, containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	if id == ctr || again.id == pod.id {
		t.Errorf("recreated pod reused the lost IDs")
	}
	st, _ := e.status(t, again.id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || podIP(st) == "" {
		t.Errorf("recreated pod: state %v ip %q", st.State, podIP(st))
	}
	e.stopAndRemove(t, again.id)
	e.assertNoLeaks(t)
}

// overwriteStart replaces the first n bytes of the file at path with random
// bytes and returns the file's new content.
func overwriteStart(t *testing.T, path string, n int) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(data[:min(n, len(data))]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// requireSecondDaemonRefused runs a second podbayd on e's configuration
// while e's daemon serves: it must exit with an error naming the lock, and
// leave the database where it is.
func requireSecondDaemonRefused(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin("podbayd"), "--config", e.configPath,
		"--metrics-address", "127.0.0.1:0", "--stream-port", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "held by another process") {
		t.Errorf("second podbayd on the same root: %v\n%s", err, out)
	}
	if moved, _ := filepath.Glob(filepath.Join(e.rootDir, "podbay.db.corrupt-*")); len(moved) != 0 {
		t.Fatalf("a held database was quarantined: %v", moved)
	}
	if !e.running() {
		t.Fatal("the first podbayd died")
	}
}
