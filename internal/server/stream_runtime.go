package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/streaming"
)

// streamRuntime runs the sessions of the streaming server: the URLs that
// Exec, Attach and PortForward return lead here once the client connects.
// The container or pod is looked up again, since it may have stopped in
// between.
type streamRuntime struct {
	s *Server
}

var _ streaming.Runtime = streamRuntime{}

// Exec runs cmd in the container with the client's streams. A non-zero
// exit status is reported to the client as an exec.CodeExitError, which
// the kubelet's server sends as the command's exit code.
func (r streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, stdin io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	ctx = log.With(ctx, "session", "exec", "container", containerID)
	c, rt, err := r.s.runningContainerRuntime(containerID)
	if err != nil {
		return err
	}
	opts := runtime.ExecStreamOptions{
		Args: cmd, Tty: tty, Resize: terminalSizes(ctx, resize),
		Stdin: stdin, Stdout: writerOrNil(stdout), Stderr: writerOrNil(stderr),
	}
	code, err := rt.Exec(ctx, c.ID, opts)
	if err != nil {
		return sessionError(ctx, err)
	}
	log.G(ctx).Debug("exec session ended", "exit_code", code)
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: int(code)}
	}
	return nil
}

// Attach connects the client's streams to the container's stdio. Whether
// the container has a terminal, and whether its stdin closes after the
// first attach, come from its configuration, as in containerd.
func (r streamRuntime) Attach(ctx context.Context, containerID string, stdin io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	ctx = log.With(ctx, "session", "attach", "container", containerID)
	c, rt, err := r.s.runningContainerRuntime(containerID)
	if err != nil {
		return err
	}
	req := c.Record().Request
	if req == nil {
		return fmt.Errorf("container %s: its record holds no request", c.ID)
	}
	opts := runtime.AttachOptions{
		Tty: req.Tty, StdinOnce: req.StdinOnce, Resize: terminalSizes(ctx, resize),
		Stdout: writerOrNil(stdout), Stderr: writerOrNil(stderr),
	}
	// Without a terminal or stdin, conmon has nothing to send input to.
	if req.Tty || req.Stdin {
		opts.Stdin = stdin
	}
	return sessionError(ctx, rt.Attach(ctx, c.ID, opts))
}

// sessionError is what a session reports: nothing when it ended because
// its client went away, since nobody is left to read it (the kubelet's
// server would log it as an error).
func sessionError(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), streaming.ErrClientGone) {
		log.G(ctx).Debug("streaming client went away", "err", err)
		return nil
	}
	return err
}

// PortForward connects the stream to port on the pod's loopback, from
// inside the pod's network namespace (or the host's, for a pod on the
// host network), and copies both ways until the connection ends.
func (r streamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	ctx = log.With(ctx, "session", "portforward", "pod", podSandboxID, "port", port)
	if port <= 0 || port > 65535 {
		return fmt.Errorf("port %d is out of range", port)
	}
	sb, err := r.s.readySandbox(podSandboxID)
	if err != nil {
		return err
	}
	conn, err := dialPodLoopback(ctx, r.s.netns, sb.Record(), int(port))
	if err != nil {
		return fmt.Errorf("connect to port %d in pod %s: %w", port, sb.ID, err)
	}
	log.G(ctx).Debug("port forward connected")
	return streaming.Forward(ctx, conn, stream)
}

// dialPodLoopback connects to port on the pod's localhost: 127.0.0.1,
// then ::1 if nothing listens there.
func dialPodLoopback(ctx context.Context, ns NetNS, rec sandbox.Record, port int) (net.Conn, error) {
	dial := func(addr string) (net.Conn, error) {
		if rec.NetworkMode == sandbox.ModeHost {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
		return ns.Dial(ctx, rec.NetworkSettings.SandboxKey, addr)
	}
	conn, err := dial(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if errors.Is(err, syscall.ECONNREFUSED) {
		if conn6, err6 := dial(net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
			return conn6, nil
		}
	}
	return conn, err
}

// writerOrNil returns w as an io.Writer, nil when w is nil (the kubelet's
// server passes nil for a stream the client did not ask for).
func writerOrNil(w io.WriteCloser) io.Writer {
	if w == nil {
		return nil
	}
	return w
}

// terminalSizes passes the client's terminal sizes on to the runtime
// until ctx ends or the client stops sending them. The kubelet's server
// closes its channel when the client's resize stream ends.
func terminalSizes(ctx context.Context, in <-chan remotecommand.TerminalSize) <-chan runtime.Size {
	if in == nil {
		return nil
	}
	out := make(chan runtime.Size)
	go func() {
		defer close(out)
		for {
			select {
			case size, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- runtime.Size{Width: size.Width, Height: size.Height}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// streamTLS is the streaming server's TLS config, nil without
// stream_tls_cert.
func streamTLS(cfg *config.Config) (*tls.Config, error) {
	if cfg == nil || cfg.StreamTLSCert == "" {
		return nil, nil
	}
	return streaming.TLSConfig(cfg.StreamTLSCert, cfg.StreamTLSKey, cfg.StreamTLSCA)
}
