package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	sremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// fakeRuntime serves sessions without containers: exec echoes its stdin
// and command line, or blocks until its context ends when the command is
// "block"; port forwarding connects to a local listener.
type fakeRuntime struct {
	forwardTo string // host:port

	mu      sync.Mutex
	ended   []error // context causes of the blocked execs, once they end
	endedCh chan struct{}
	started chan struct{}
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{endedCh: make(chan struct{}, 10), started: make(chan struct{}, 10)}
}

func (f *fakeRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan sremotecommand.TerminalSize) error {
	if cmd[0] == "block" {
		f.started <- struct{}{}
		<-ctx.Done()
		f.mu.Lock()
		f.ended = append(f.ended, context.Cause(ctx))
		f.mu.Unlock()
		f.endedCh <- struct{}{}
		return ctx.Err()
	}
	if cmd[0] == "size" { // the first terminal size the client sent
		select {
		case sz := <-resize:
			fmt.Fprintf(out, "%dx%d\n", sz.Width, sz.Height)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fmt.Fprintf(out, "%s in %s\n", strings.Join(cmd, " "), containerID)
	if in != nil {
		if _, err := io.Copy(out, in); err != nil {
			return err
		}
	}
	fmt.Fprintln(errOut, "to stderr")
	if cmd[0] == "fail" {
		return utilexec.CodeExitError{Err: errors.New("failed"), Code: 3}
	}
	return nil
}

func (f *fakeRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan sremotecommand.TerminalSize) error {
	fmt.Fprintf(out, "attached to %s\n", containerID)
	return nil
}

func (f *fakeRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	conn, err := net.Dial("tcp", f.forwardTo)
	if err != nil {
		return err
	}
	return Forward(ctx, conn, stream)
}

// startServer serves rt on a loopback port until the test ends.
func startServer(t *testing.T, rt Runtime) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(l, rt, Config{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// stream runs a remotecommand session against rawURL, as crictl does.
func stream(ctx context.Context, rawURL string, opts remotecommand.StreamOptions) error {
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

func TestExec(t *testing.T) {
	s := startServer(t, newFakeRuntime())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name     string
		cmd      string
		wantCode int
	}{
		{name: "success", cmd: "echo"},
		{name: "exit code", cmd: "fail", wantCode: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{tc.cmd, "x"}, Stdin: true, Stdout: true, Stderr: true})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(resp.Url, "http://"+s.Addr().String()+"/exec/") {
				t.Errorf("URL %q is not on the server's address %s", resp.Url, s.Addr())
			}
			var stdout, stderr bytes.Buffer
			err = stream(ctx, resp.Url, remotecommand.StreamOptions{Stdin: strings.NewReader("input\n"), Stdout: &stdout, Stderr: &stderr})
			var exitErr utilexec.ExitError
			switch {
			case tc.wantCode == 0 && err != nil:
				t.Fatalf("stream: %v", err)
			case tc.wantCode != 0 && (!errors.As(err, &exitErr) || exitErr.ExitStatus() != tc.wantCode):
				t.Fatalf("stream = %v, want exit code %d", err, tc.wantCode)
			}
			if want := tc.cmd + " x in c1\ninput\n"; stdout.String() != want || stderr.String() != "to stderr\n" {
				t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), want, "to stderr\n")
			}
			// The URL is single-use.
			if err := stream(ctx, resp.Url, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
				t.Error("a used URL served a second session")
			}
		})
	}
}

func TestAttach(t *testing.T) {
	s := startServer(t, newFakeRuntime())
	resp, err := s.GetAttach(&runtimeapi.AttachRequest{ContainerId: "c2", Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := stream(context.Background(), resp.Url, remotecommand.StreamOptions{Stdout: &stdout}); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "attached to c2\n" {
		t.Errorf("stdout %q", stdout.String())
	}
}

// TestClientGone: a session's context ends, with ErrClientGone, when its
// client's connection closes, and a shutdown ends the sessions still
// running.
func TestClientGone(t *testing.T) {
	rt := newFakeRuntime()
	s := startServer(t, rt)
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"block"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream(ctx, resp.Url, remotecommand.StreamOptions{Stdout: io.Discard}) }()
	waitFor(t, rt.started, "the exec to start")
	cancel() // the client closes its connection
	waitFor(t, rt.endedCh, "the exec's context to end")
	<-done
	rt.mu.Lock()
	if !errors.Is(rt.ended[0], ErrClientGone) {
		t.Errorf("cause %v, want ErrClientGone", rt.ended[0])
	}
	rt.mu.Unlock()

	// A session still running when the server shuts down is ended.
	resp, err = s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"block"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- stream(context.Background(), resp.Url, remotecommand.StreamOptions{Stdout: io.Discard})
	}()
	waitFor(t, rt.started, "the second exec to start")
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShutdown()
	if err := s.Shutdown(shutdownCtx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waitFor(t, rt.endedCh, "the second exec to end at shutdown")
	<-done
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestPortForward(t *testing.T) {
	// An echo server that answers after the client closed its side, as
	// `nc` with a request does.
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
				data, _ := io.ReadAll(c)
				_, _ = c.Write(bytes.ToUpper(data))
			}()
		}
	}()
	rt := newFakeRuntime()
	rt.forwardTo = l.Addr().String()
	s := startServer(t, rt)
	resp, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "pod", Port: []int32{8080}})
	if err != nil {
		t.Fatal(err)
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
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fwDone := make(chan error, 1)
	go func() { fwDone <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := <-fwDone; err != nil {
			t.Errorf("ForwardPorts: %v", err)
		}
	}()
	waitFor(t, ready, "the port forward")
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("hello %d", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != strings.ToUpper(msg) {
			t.Fatalf("connection %d: got %q, %v; want %q", i, got, err, strings.ToUpper(msg))
		}
	}
}
