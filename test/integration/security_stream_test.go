package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestSecurityStreamSessionsLeak runs many exec and attach sessions, some
// ended by their process, some by a client that goes away in the middle
// of a large output, and requires the daemon to end with the goroutines
// and open files it had: a client that can open sessions must not be able
// to make the daemon keep resources for them.
func TestSecurityStreamSessionsLeak(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "streamleak")
	defer e.removePod(t, pod.id)
	id, _ := e.runContainer(t, pod, containerConfig("streamleak", images.ref("busybox"),
		ctrShell("while :; do echo tick; sleep 0.05; done")))
	defer e.removeContainer(t, id)

	session := func() {
		// An exec that ends by itself, with 1 MB of output.
		if err := e.stream(t, e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"head", "-c", "1000000", "/dev/zero"}, Stdout: true}),
			remotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
			t.Errorf("exec session: %v", err)
		}
		// An exec and an attach whose client goes away while output flows.
		for _, url := range []string{
			e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"cat", "/dev/zero"}, Stdout: true, Stderr: true}),
			e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true, Stderr: true}),
		} {
			ctx, cancel := context.WithCancel(context.Background())
			out := &firstWrite{seen: make(chan struct{})}
			done := make(chan error, 1)
			go func() { done <- streamURL(ctx, url, remotecommand.StreamOptions{Stdout: out, Stderr: io.Discard}) }()
			select {
			case <-out.seen:
			case <-time.After(streamTimeout):
				t.Errorf("no output from %s", url)
			}
			cancel()
			waitErr(t, done)
		}
	}
	session() // one-time costs
	pid := e.daemonPid()
	before := e.daemonResources(t, pid)
	const rounds = 15
	for range rounds {
		session()
	}
	// What the sessions started ends shortly after they do.
	var after daemonResources
	if err := eventually(20*time.Second, func() error {
		after = e.daemonResources(t, pid)
		if after.goroutines > before.goroutines+5 || after.fds > before.fds+2 {
			return fmt.Errorf("%s before, %s after", before, after)
		}
		return nil
	}); err != nil {
		t.Errorf("after %d rounds of exec and attach sessions: %v", rounds, err)
	}
	t.Logf("%d rounds: %s before, %s after", rounds, before, after)
	// The exec'd cats are gone with their clients.
	if ps := e.execOutput(t, id, "ps", "-o", "args"); strings.Contains(ps, "cat /dev/zero") {
		t.Errorf("exec'd processes left after their clients went away:\n%s", ps)
	}
}

// daemonResources is what the daemon holds that a leak would grow.
type daemonResources struct{ goroutines, fds int }

func (r daemonResources) String() string {
	return fmt.Sprintf("%d goroutines and %d open files", r.goroutines, r.fds)
}

// daemonResources reads the daemon's open files from /proc and its
// goroutines from its metrics endpoint.
func (e *env) daemonResources(t *testing.T, pid int) daemonResources {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return daemonResources{goroutines: (&chaos{e: e}).goroutines(t), fds: len(fds)}
}

// firstWrite discards what is written to it and closes seen on the first
// write.
type firstWrite struct {
	seen chan struct{}
	once sync.Once
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.seen) })
	return len(p), nil
}
