package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// start runs podbayd with the given PODBAY_FAILPOINTS and waits until it
// answers Version.
func (e *env) start(failpoints string) {
	e.t.Helper()
	if daemonBuildErr != nil {
		e.t.Fatalf("podbayd was not built: %v", daemonBuildErr)
	}
	if e.running() {
		e.t.Fatal("start: podbayd is already running")
	}
	logf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== harness: start podbayd PODBAY_FAILPOINTS=%q at %s\n", failpoints, time.Now().Format(time.RFC3339Nano))
	// A fresh metrics port at every start: while a killed daemon was down,
	// another test process may have been given its port.
	e.metricsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(e.t))
	daemon := "podbayd"
	if e.opts.daemon != "" {
		daemon = e.opts.daemon
	}
	args := []string{"--config", e.configPath, "--log-level", "debug", "--metrics-address", e.metricsAddr}
	if e.opts.logLevelFromFile {
		args = slices.Delete(args, 2, 4)
	}
	cmd := exec.Command(bin(daemon), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PODBAY_FAILPOINTS=" + failpoints}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PODBAY_FAILPOINTS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Own process group: a ^C to the test does not reach the daemon before
	// cleanup can stop it properly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		e.t.Fatalf("start podbayd: %v", err)
	}
	exited := make(chan struct{})
	e.mu.Lock()
	e.cmd, e.exited = cmd, exited
	e.mu.Unlock()
	go func() {
		err := cmd.Wait()
		if f, ferr := os.OpenFile(e.logPath, os.O_WRONLY|os.O_APPEND, 0); ferr == nil {
			fmt.Fprintf(f, "=== harness: podbayd pid %d exited: %v\n", cmd.Process.Pid, err)
			f.Close()
		}
		close(exited)
	}()

	conn, err := grpc.NewClient("unix://"+e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()), quickReconnect)
	if err != nil {
		e.t.Fatalf("grpc client: %v", err)
	}
	e.conn = conn
	e.rt = runtimeapi.NewRuntimeServiceClient(conn)
	e.img = runtimeapi.NewImageServiceClient(conn)

	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			e.t.Fatalf("podbayd exited during startup:\n%s", e.logTail(60))
		default:
		}
		if _, err := os.Stat(e.sock); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, lastErr = e.rt.Version(ctx, &runtimeapi.VersionRequest{})
			cancel()
			if lastErr == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("podbayd did not serve within %v (last error %v):\n%s", startTimeout, lastErr, e.logTail(60))
}

// quickReconnect keeps gRPC's reconnect backoff short: a restarted daemon
// is seen as soon as it serves, not after the default backoff (1 s and
// growing) that a refused connection to the old socket started.
var quickReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
	MinConnectTimeout: 5 * time.Second,
})

// running reports whether this env's podbayd process is alive.
func (e *env) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

// daemonPid is the running daemon's pid, or 0.
func (e *env) daemonPid() int {
	if !e.running() {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cmd.Process.Pid
}

func (e *env) closeClient() {
	if e.conn != nil {
		e.conn.Close()
		e.conn = nil
	}
}

// kill9 SIGKILLs the daemon and waits for it to be gone.
func (e *env) kill9() {
	e.t.Helper()
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	if cmd == nil {
		e.t.Fatal("kill9: podbayd was never started")
	}
	cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // may have exited already
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		e.t.Fatal("podbayd did not die after SIGKILL")
	}
	e.closeClient()
}

// stop sends SIGTERM and waits for a clean exit.
func (e *env) stop() {
	e.t.Helper()
	if err := e.terminate(); err != nil {
		e.t.Error(err)
	}
}

func (e *env) terminate() error {
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	if cmd == nil {
		return nil
	}
	defer e.closeClient()
	select {
	case <-exited:
		return nil
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // may have exited already
	select {
	case <-exited:
		if cmd.ProcessState != nil && !cmd.ProcessState.Success() {
			return fmt.Errorf("podbayd exited with %v after SIGTERM", cmd.ProcessState)
		}
		return nil
	case <-time.After(exitTimeout):
		cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck
		<-exited
		return fmt.Errorf("podbayd did not exit within %v of SIGTERM; killed", exitTimeout)
	}
}

// waitExit waits for a daemon that is expected to die by itself (a kill
// failpoint).
func (e *env) waitExit(timeout time.Duration) {
	e.t.Helper()
	e.mu.Lock()
	exited := e.exited
	e.mu.Unlock()
	select {
	case <-exited:
		e.closeClient()
	case <-time.After(timeout):
		e.t.Fatalf("podbayd still running %v after it should have killed itself:\n%s", timeout, e.logTail(40))
	}
}

// restart SIGKILLs the daemon if it is still running, then starts it again
// on the same root and state.
func (e *env) restart(failpoints string) {
	e.t.Helper()
	if e.running() {
		e.kill9()
	}
	e.closeClient()
	e.start(failpoints)
}

func (e *env) logTail(n int) string { return fileTail(e.logPath, n) }

func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkDaemonLog fails the test on a panic or, with PODBAY_ITEST_RACE=1, a
// data race the daemon reported, even if it went on serving.
func (e *env) checkDaemonLog(t *testing.T) {
	data, err := os.ReadFile(e.logPath)
	if err != nil {
		return
	}
	log := string(data)
	for _, marker := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
		if i := strings.Index(log, marker); i >= 0 {
			end := min(len(log), i+4000)
			t.Errorf("podbayd log reports %q:\n%s", strings.TrimSpace(marker), log[i:end])
		}
	}
}
