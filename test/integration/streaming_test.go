package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// streamTimeout bounds one streaming session in these tests.
const streamTimeout = 30 * time.Second

// TestStreaming runs Exec, Attach and PortForward sessions the way crictl
// and the kubelet's proxy do: the RPC returns a URL, and client-go's
// SPDY client connects to it.
func TestStreaming(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")
	pod := e.runTestPod(t, "stream")
	defer e.removePod(t, pod.id)

	t.Run("exec", func(t *testing.T) {
		id, _ := e.runContainer(t, pod, containerConfig("exec", busybox, ctrCommand("sleep", "1000")))
		defer e.removeContainer(t, id)

		for _, tc := range []struct {
			name string
			req  *runtimeapi.ExecRequest
			want codes.Code
		}{
			{"no command", &runtimeapi.ExecRequest{ContainerId: id, Stdout: true}, codes.InvalidArgument},
			{"no stream", &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}}, codes.InvalidArgument},
			{"tty and stderr", &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Tty: true, Stdout: true, Stderr: true}, codes.InvalidArgument},
			{"unknown container", &runtimeapi.ExecRequest{ContainerId: randHex(32), Cmd: []string{"true"}, Stdout: true}, codes.NotFound},
		} {
			if _, err := e.rt.Exec(rpcCtx(t), tc.req); code(err) != tc.want {
				t.Errorf("Exec with %s: %v, want %v", tc.name, err, tc.want)
			}
		}

		// Streams apart, stdin to end of file, exit code.
		var stdout, stderr bytes.Buffer
		err := e.stream(t, e.execURL(t, &runtimeapi.ExecRequest{
			ContainerId: id, Cmd: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: true, Stdout: true, Stderr: true,
		}), remotecommand.StreamOptions{Stdin: strings.NewReader("hello\n"), Stdout: &stdout, Stderr: &stderr})
		var exitErr utilexec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
			t.Errorf("exec session: %v, want exit code 3", err)
		}
		if stdout.String() != "hello\n" || stderr.String() != "err\n" {
			t.Errorf("exec session: stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), "hello\n", "err\n")
		}
		stdout.Reset()
		if err := e.stream(t, e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id[:12], Cmd: []string{"echo", "by prefix"}, Stdout: true}),
			remotecommand.StreamOptions{Stdout: &stdout}); err != nil || stdout.String() != "by prefix\n" {
			t.Errorf("exec session by ID prefix: %v, stdout %q", err, stdout.String())
		}

		t.Run("tty", func(t *testing.T) {
			var out syncBuffer
			stdinR, stdinW := io.Pipe()
			defer stdinW.Close()
			sizes := &sizeQueue{ch: make(chan *remotecommand.TerminalSize, 2)}
			defer close(sizes.ch)
			sizes.ch <- &remotecommand.TerminalSize{Width: 100, Height: 30}
			done := make(chan error, 1)
			url := e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true})
			go func() {
				done <- e.stream(t, url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
			}()
			send := func(line string) { _, _ = io.WriteString(stdinW, line+"\n") }
			out.wait(t, "30 100\r\n", func() { send("busybox stty size") })
			sizes.ch <- &remotecommand.TerminalSize{Width: 132, Height: 43}
			out.wait(t, "43 132\r\n", func() { send("busybox stty size") })
			send("exit 4")
			err := waitErr(t, done)
			if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 4 {
				t.Errorf("tty exec session: %v, want exit code 4", err)
			}
		})

		t.Run("client gone", func(t *testing.T) {
			var out syncBuffer
			stdinR, stdinW := io.Pipe()
			defer stdinW.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			url := e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "sleep 999 & echo started; cat"}, Stdin: true, Stdout: true})
			go func() { done <- streamURL(ctx, url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out}) }()
			out.wait(t, "started", nil)
			cancel()
			waitErr(t, done)
			// The exec'd shell, its cat and its background sleep are
			// killed; only the container's own process is left. Through
			// a shim (vm handlers) only the exec'd process is killed, as
			// with containerd: a VM runtime's pids are not the host's, so
			// the orphaned background sleep stays in the container (cat
			// ends with its stdin).
			orphanKilled := suiteRuntimeType != "vm"
			if err := eventually(10*time.Second, func() error {
				if ps := e.execOutput(t, id, "ps", "-o", "args"); (orphanKilled && strings.Contains(ps, "sleep 999")) || strings.Contains(ps, "cat") || strings.Contains(ps, "echo started") {
					return errors.New(ps)
				}
				return nil
			}); err != nil {
				t.Errorf("processes of the exec left after its client went away:\n%v", err)
			}
		})
	})

	t.Run("attach", func(t *testing.T) {
		stdinOnce := func(c *runtimeapi.ContainerConfig) { c.Stdin, c.StdinOnce = true, true }
		id, _ := e.runContainer(t, pod, containerConfig("attach", busybox, ctrCommand("cat"), stdinOnce))
		defer e.removeContainer(t, id)
		if _, err := e.rt.Attach(rpcCtx(t), &runtimeapi.AttachRequest{ContainerId: id}); code(err) != codes.InvalidArgument {
			t.Errorf("Attach without streams: %v, want InvalidArgument", err)
		}

		var out syncBuffer
		stdinR, stdinW := io.Pipe()
		done := make(chan error, 1)
		url := e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Stderr: true})
		go func() {
			done <- e.stream(t, url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out, Stderr: io.Discard})
		}()
		// The first line may be sent before the attach is connected;
		// conmon only passes on what it reads while one is.
		out.wait(t, "ping\n", func() { _, _ = io.WriteString(stdinW, "ping\n") })
		// StdinOnce: the end of the client's input closes the container's
		// stdin, cat exits, and so does the container.
		stdinW.Close()
		if err := waitErr(t, done); err != nil {
			t.Errorf("attach session: %v", err)
		}
		st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
		if st.ExitCode != 0 {
			t.Errorf("container exit code %d after its stdin closed, want 0", st.ExitCode)
		}
		if _, err := e.rt.Attach(rpcCtx(t), &runtimeapi.AttachRequest{ContainerId: id, Stdout: true}); code(err) != codes.FailedPrecondition {
			t.Errorf("Attach to an exited container: %v, want FailedPrecondition", err)
		}

		t.Run("tty", func(t *testing.T) {
			tty := func(c *runtimeapi.ContainerConfig) { c.Tty, c.Stdin = true, true }
			id, _ := e.runContainer(t, pod, containerConfig("attach-tty", busybox, ctrCommand("sh"), tty))
			defer e.removeContainer(t, id)
			var out syncBuffer
			stdinR, stdinW := io.Pipe()
			defer stdinW.Close()
			sizes := &sizeQueue{ch: make(chan *remotecommand.TerminalSize, 1)}
			defer close(sizes.ch)
			sizes.ch <- &remotecommand.TerminalSize{Width: 90, Height: 20}
			done := make(chan error, 1)
			url := e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Tty: true})
			go func() {
				done <- e.stream(t, url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
			}()
			send := func(line string) { _, _ = io.WriteString(stdinW, line+"\n") }
			out.wait(t, "20 90\r\n", func() { send("busybox stty size") })
			send("exit 5")
			if err := waitErr(t, done); err != nil {
				t.Errorf("tty attach session: %v", err)
			}
			if st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout); st.ExitCode != 5 {
				t.Errorf("container exit code %d, want 5", st.ExitCode)
			}
		})
	})

	t.Run("port-forward", func(t *testing.T) {
		if _, err := e.rt.PortForward(rpcCtx(t), &runtimeapi.PortForwardRequest{PodSandboxId: randHex(32), Port: []int32{80}}); code(err) != codes.NotFound {
			t.Errorf("PortForward to an unknown pod: %v, want NotFound", err)
		}
		if _, err := e.rt.PortForward(rpcCtx(t), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id, Port: []int32{70000}}); code(err) != codes.InvalidArgument {
			t.Errorf("PortForward to port 70000: %v, want InvalidArgument", err)
		}
		// An echo server in the pod's network namespace; the forward
		// reaches it on the pod's loopback.
		id, pid := e.runContainer(t, pod, containerConfig("echo", busybox, ctrCommand("nc", "-ll", "-p", "8080", "-e", "/bin/cat")))
		defer e.removeContainer(t, id)
		// A forward to a port nobody listens on yet ends the forwarder
		// (client-go stops on the pod's error): wait for nc first.
		requireListening(t, pid, 8080)
		e.requireForwardEcho(t, pod.id, 8080)

		// A pod on the host network is forwarded to the host's loopback,
		// here to an echo server of the test's own (a container would
		// listen on every host address).
		t.Run("host network", func(t *testing.T) {
			hostPod := e.runTestPod(t, "stream-host", withHostNetwork())
			defer e.removePod(t, hostPod.id)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						_, _ = io.Copy(c, c)
					}()
				}
			}()
			e.requireForwardEcho(t, hostPod.id, l.Addr().(*net.TCPAddr).Port)
		})
	})
}

// requireForwardEcho forwards a local port to port in the pod with
// client-go's port forwarder, as kubectl port-forward does, and checks
// that two connections are echoed.
func (e *env) requireForwardEcho(t *testing.T, podID string, port int) {
	t.Helper()
	resp, err := e.rt.PortForward(rpcCtx(t), &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{int32(port)}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		t.Fatal(err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{Host: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fwDone := make(chan error, 1)
	go func() { fwDone <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := waitErr(t, fwDone); err != nil {
			t.Errorf("port forwarder: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-fwDone:
		t.Fatalf("port forwarder: %v", err)
	case <-time.After(streamTimeout):
		t.Fatal("port forwarder not ready")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	local := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
	// The server may still be starting: the first connection is retried.
	if err := eventually(10*time.Second, func() error { return echoOnce(local, "hello "+short(podID)) }); err != nil {
		t.Fatalf("forwarded port %d of pod %s: %v", port, short(podID), err)
	}
	if err := echoOnce(local, strings.Repeat("x", 100_000)); err != nil {
		t.Errorf("second connection: %v", err)
	}
}

// requireListening waits until a TCP socket listens on port in the
// network namespace of process pid (its /proc/<pid>/net/tcp and tcp6).
func requireListening(t *testing.T, pid, port int) {
	t.Helper()
	const listen = "0A"
	want := fmt.Sprintf(":%04X", port)
	err := eventually(streamTimeout, func() error {
		for _, f := range []string{"tcp", "tcp6"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n")[1:] {
				// sl local_address rem_address st ...
				if fs := strings.Fields(line); len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == listen {
					return nil
				}
			}
		}
		return fmt.Errorf("nothing listens on port %d in the namespace of pid %d", port, pid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// echoOnce sends msg over a new connection to addr and expects it back.
func echoOnce(addr, msg string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { _, _ = io.WriteString(c, msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read the echo: %w", err)
	}
	if string(got) != msg {
		return fmt.Errorf("echo %.40q, want %.40q", got, msg)
	}
	return nil
}

func (e *env) execURL(t *testing.T, req *runtimeapi.ExecRequest) string {
	t.Helper()
	resp, err := e.rt.Exec(rpcCtx(t), req)
	if err != nil {
		t.Fatalf("Exec %q: %v", req.Cmd, err)
	}
	return resp.Url
}

func (e *env) attachURL(t *testing.T, req *runtimeapi.AttachRequest) string {
	t.Helper()
	resp, err := e.rt.Attach(rpcCtx(t), req)
	if err != nil {
		t.Fatalf("Attach %s: %v", short(req.ContainerId), err)
	}
	return resp.Url
}

// stream runs a session against rawURL within streamTimeout.
func (e *env) stream(t *testing.T, rawURL string, opts remotecommand.StreamOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), streamTimeout)
	defer cancel()
	return streamURL(ctx, rawURL, opts)
}

// streamURL runs a remotecommand session over SPDY, as crictl does.
func streamURL(ctx context.Context, rawURL string, opts remotecommand.StreamOptions) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: u.Host}, http.MethodPost, u)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

func waitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(streamTimeout + 5*time.Second):
		t.Fatal("session did not end")
		return nil
	}
}

// sizeQueue hands terminal sizes to client-go's executor; closing ch ends
// its resize stream.
type sizeQueue struct {
	ch chan *remotecommand.TerminalSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize { return <-q.ch }

// syncBuffer is an output stream the test reads while a session writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// wait waits until b holds want, calling poke (if any) every half
// second: a resize or an attach needs a moment to take effect.
func (b *syncBuffer) wait(t *testing.T, want string, poke func()) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	next := time.Now()
	for time.Now().Before(deadline) {
		if strings.Contains(b.String(), want) {
			return
		}
		if poke != nil && time.Now().After(next) {
			poke()
			next = time.Now().Add(500 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("output %q does not contain %q", b.String(), want)
}
