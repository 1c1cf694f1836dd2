package streaming

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// ForwardGrace is how long Forward keeps copying the other way once one
// way has ended, as containerd does (after socat's -t): a client that
// closes its side still gets the answer the pod sends in that time, and
// a pod that keeps its connection open does not keep the forward open
// for ever (over SPDY, the forward's context never ends).
const ForwardGrace = time.Second

// Forward copies between a port-forward stream and a connection to the
// pod's port until one way ends and the other has ended too or
// ForwardGrace has passed, or ctx ends. The error is the first way's, or
// else the other's. When the stream ends, the
// connection's sending side is shut down, so the pod's end reads end of
// file. conn is closed on return; the stream is the caller's.
func Forward(ctx context.Context, conn net.Conn, stream io.ReadWriteCloser) error {
	defer conn.Close()
	toPod, fromPod := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, stream)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		toPod <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		fromPod <- err
	}()

	var other chan error
	var err error
	select {
	case err = <-toPod:
		other = fromPod
	case err = <-fromPod:
		other = toPod
	case <-ctx.Done():
		return ctx.Err()
	}
	grace := time.NewTimer(ForwardGrace)
	defer grace.Stop()
	select {
	case err2 := <-other:
		if err = ignoreClosed(err); err == nil {
			err = ignoreClosed(err2)
		}
	case <-grace.C:
		err = ignoreClosed(err)
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// ignoreClosed drops the error of a copy cut off because the other way
// closed the connection.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
