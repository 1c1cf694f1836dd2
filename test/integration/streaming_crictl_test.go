package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var (
	crictlOnce sync.Once
	crictlPath string
	crictlErr  error
)

// crictl builds crictl from the tools module (the version the Makefile
// pins) into binDir, once.
func crictl(t *testing.T) string {
	t.Helper()
	crictlOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			crictlErr = err
			return
		}
		out := filepath.Join(binDir, "crictl")
		cmd := exec.Command("go", "build", "-o", out, "sigs.k8s.io/cri-tools/cmd/crictl")
		cmd.Dir = filepath.Join(root, "tools")
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			crictlErr = fmt.Errorf("build crictl: %v\n%s", err, b)
			return
		}
		crictlPath = out
	})
	if crictlErr != nil {
		t.Fatal(crictlErr)
	}
	return crictlPath
}

// runCrictl runs crictl against e's daemon with stdin.
func (e *env) runCrictl(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, crictl(t), append([]string{"--runtime-endpoint", "unix://" + e.sock, "--timeout", "20s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestStreamingCrictlWebSocket: `crictl --transport websocket` exec and
// attach (WebSocket v5) against a real daemon, over plain HTTP and TLS.
func TestStreamingCrictlWebSocket(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey := writeTestCert(t, dir, "server")
	cliCert, cliKey := writeTestCert(t, dir, "client")
	for _, tlsOn := range []bool{false, true} {
		name := "http"
		opts := envOptions{}
		var tlsFlags []string
		if tlsOn {
			name = "tls"
			opts.topConfig = fmt.Sprintf("stream_tls_cert = %q\nstream_tls_key = %q\nstream_tls_ca = %q\n", srvCert, srvKey, cliCert)
			tlsFlags = []string{"--tls-ca", srvCert, "--tls-cert", cliCert, "--tls-key", cliKey}
		}
		t.Run(name, func(t *testing.T) {
			e, images := newContainerEnvWith(t, opts, "busybox")
			pod := e.runTestPod(t, "crictl-ws")
			id, _ := e.runContainer(t, pod, containerConfig("exec", images.ref("busybox"), ctrCommand("sleep", "1000")))

			execArgs := append([]string{"exec", "--transport", "websocket"}, tlsFlags...)
			out, stderr, err := e.runCrictl(t, "", append(execArgs, id, "echo", "over v5")...)
			if err != nil || out != "over v5\n" {
				t.Errorf("crictl exec --transport websocket: %q %q %v", out, stderr, err)
			}
			out, stderr, err = e.runCrictl(t, "piped in\n", append(append(execArgs, "-i"), id, "cat")...)
			if err != nil || out != "piped in\n" {
				t.Errorf("crictl exec -i --transport websocket (stdin half-close): %q %q %v", out, stderr, err)
			}
			// crictl exits 1 on any error of an exec session; the code is in
			// its message.
			_, stderr, err = e.runCrictl(t, "", append(execArgs, id, "sh", "-c", "exit 7")...)
			if err == nil || !strings.Contains(stderr, "exit code 7") {
				t.Errorf("crictl exec of exit 7 over websocket: %v %q, want exit code 7", err, stderr)
			}
			if tlsOn {
				if out, _, err := e.runCrictl(t, "", "exec", "--transport", "websocket", "--tls-ca", srvCert, id, "echo", "x"); err == nil {
					t.Errorf("crictl exec without a client certificate: served %q", out)
				}
			}

			stdinOnce := func(c *runtimeapi.ContainerConfig) { c.Stdin, c.StdinOnce = true, true }
			aid, _ := e.runContainer(t, pod, containerConfig("attach", images.ref("busybox"), ctrShell("read line; echo \"got $line\""), stdinOnce))
			attachArgs := append([]string{"attach", "--transport", "websocket", "-i"}, tlsFlags...)
			out, stderr, err = e.runCrictl(t, "hello\n", append(attachArgs, aid)...)
			if err != nil || !strings.Contains(out, "got hello") {
				t.Errorf("crictl attach -i --transport websocket: %q %q %v", out, stderr, err)
			}
			e.waitContainerState(t, aid, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
			e.removeContainer(t, aid)

			// port-forward: SPDY tunnelled through the WebSocket.
			echo, _ := e.runContainer(t, pod, containerConfig("echo", images.ref("busybox"), ctrCommand("nc", "-ll", "-p", "8080", "-e", "/bin/cat")))
			e.requireCrictlForward(t, pod.id, append([]string{"port-forward", "--transport", "websocket"}, tlsFlags...))
			e.removeContainer(t, echo)
			e.removeContainer(t, id)
			e.stopAndRemove(t, pod.id)
			e.assertNoLeaks(t)
		})
	}
}

// requireCrictlForward runs `crictl port-forward ... POD :8080` and
// checks that a connection to its local port is echoed.
func (e *env) requireCrictlForward(t *testing.T, podID string, args []string) {
	t.Helper()
	cmd := exec.Command(crictl(t), append(append([]string{"--runtime-endpoint", "unix://" + e.sock}, args...), podID, ":8080")...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// "Forwarding from 127.0.0.1:41234 -> 8080"
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "Forwarding" && strings.HasPrefix(f[2], "127.0.0.1:") {
				addr <- f[2]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var local string
	select {
	case local = <-addr:
	case <-time.After(streamTimeout):
		t.Fatalf("crictl %v: no forwarding line; stderr %q", args, stderr.String())
	}
	for i := range 2 {
		c, err := net.DialTimeout("tcp", local, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		msg := fmt.Sprintf("through the tunnel %d\n", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		_, err = io.ReadFull(c, got)
		c.Close()
		if err != nil || string(got) != msg {
			t.Errorf("crictl %v: connection %d echoed %q, %v; want %q (stderr %q)", args, i, got, err, msg, stderr.String())
		}
	}
}
