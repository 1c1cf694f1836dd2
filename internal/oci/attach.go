package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// conmon's attach socket (src/conn_sock.c, src/ctr_stdio.c): a
// SOCK_SEQPACKET unix socket named "attach" in the bundle. Each packet
// conmon sends is one read of the container's output, at most
// STDIO_BUF_SIZE (8192) bytes, after one byte that names the stream.
// What a client sends is written to the container's stdin as it is;
// conmon reads at most CONN_SOCK_BUF_SIZE-1 bytes of each packet, so
// input goes in packets of attachInputMax. When the client shuts down its
// sending side, conmon closes the container's stdin if the container was
// created with Stdin and StdinOnce. With a terminal, all output is
// stdout, and stdin goes to the terminal.
const (
	attachSocket      = "attach"
	attachPipeStdout  = 2
	attachPipeStderr  = 3
	attachOutputMax   = 8192 + 1
	attachInputMax    = 8192
	ctlResizeMsgValue = 1 // WIN_RESIZE_EVENT in conmon's src/config.h
)

// Attach connects the streams in opts to container id, which must be
// running, through its conmon's attach socket, and returns when the
// container exits, when ctx ends (with ctx's error), or when Stdin ends
// and the container was created neither with a terminal nor StdinOnce
// (detach, as CRI-O does). The container is not affected by the attach
// ending. A Read on Stdin that is under way when Attach returns is not
// waited for.
//
// An unknown ID gives an error wrapping errdefs.ErrNotFound; a container
// that is not running, or has no conmon, errdefs.ErrFailedPrecondition.
func (r *Runtime) Attach(ctx context.Context, id string, opts runtime.AttachOptions) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	if st.Status != runtime.StatusRunning {
		return fmt.Errorf("attach to container %s: container is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	if st.MonitorPid == 0 {
		return fmt.Errorf("attach to container %s: conmon is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	conn, err := dialAttach(st.Bundle)
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("attach to container %s: conmon is not listening: %w", id, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	defer conn.Close()
	if err := attachStreams(ctx, conn, filepath.Join(st.Bundle, ctlFile), opts); err != nil {
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	return nil
}

// dialAttach connects to the attach socket in bundle. The bundle's path
// may be too long for a socket address (108 bytes), so the socket is
// reached through /proc/self/fd and a descriptor of the directory, as
// conmon binds it.
func dialAttach(bundle string) (*net.UnixConn, error) {
	dir, err := os.OpenFile(bundle, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	addr := &net.UnixAddr{Net: "unixpacket", Name: "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + attachSocket}
	conn, err := net.DialUnix("unixpacket", nil, addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", filepath.Join(bundle, attachSocket), err)
	}
	return conn, nil
}

// attachStreams runs the attach protocol on conn; see Attach.
func attachStreams(ctx context.Context, conn *net.UnixConn, ctl string, opts runtime.AttachOptions) error {
	stop := make(chan struct{})
	defer close(stop)

	outputDone := make(chan error, 1)
	go func() { outputDone <- readAttachOutput(conn, opts.Stdout, opts.Stderr) }()

	var inputDone chan error
	if opts.Stdin != nil {
		inputDone = make(chan error, 1)
		go func() {
			err := writeAttachInput(conn, opts.Stdin)
			// conmon sees the end of the client's input.
			_ = conn.CloseWrite()
			inputDone <- err
		}()
	}
	if opts.Tty && opts.Resize != nil {
		go runtime.ApplyResizes(opts.Resize, stop, func(size runtime.Size) {
			size = size.Clamp()
			// Best effort, as a terminal's resize is: conmon logs what it
			// cannot apply.
			_ = writeCtl(ctl, fmt.Sprintf("%d %d %d\n", ctlResizeMsgValue, size.Height, size.Width))
		})
	}

	select {
	case err := <-outputDone:
		return err
	case <-inputDone:
		if !opts.Tty && !opts.StdinOnce {
			return nil
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-outputDone:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readAttachOutput copies the output packets from conn to stdout and
// stderr until conmon closes the socket (the container exited) or conn
// is closed. A writer that fails is not written to again; the packets
// for it are dropped.
func readAttachOutput(conn *net.UnixConn, stdout, stderr io.Writer) error {
	buf := make([]byte, attachOutputMax)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			var dst *io.Writer
			switch buf[0] {
			case attachPipeStdout:
				dst = &stdout
			case attachPipeStderr:
				dst = &stderr
			}
			if dst != nil && *dst != nil {
				if _, werr := (*dst).Write(buf[1:n]); werr != nil {
					*dst = nil
				}
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			return nil
		case err != nil:
			return fmt.Errorf("read attach socket: %w", err)
		case n == 0:
			// A zero-length packet on a SEQPACKET socket is the end.
			return nil
		}
	}
}

// writeAttachInput sends in to conn in packets conmon reads whole.
func writeAttachInput(conn *net.UnixConn, in io.Reader) error {
	buf := make([]byte, attachInputMax)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
