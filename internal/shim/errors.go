package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podbay/podbay/internal/errdefs"
)

// errShimGone classifies calls that failed because the shim's connection
// is gone.
var errShimGone = fmt.Errorf("shim connection lost: %w", errdefs.ErrUnavailable)

// rpcError classifies an error of a call to a shim. Shims send
// containerd's error classes as ttrpc status codes (errdefs.ToGRPC), with
// the class's text at the end of the message ("process already finished:
// not found").
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	if isConnectionError(err) {
		return fmt.Errorf("%w (%v)", errShimGone, err)
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	var class error
	switch s.Code() {
	case codes.NotFound:
		class = errdefs.ErrNotFound
	case codes.AlreadyExists:
		class = errdefs.ErrAlreadyExists
	case codes.FailedPrecondition:
		class = errdefs.ErrFailedPrecondition
	case codes.InvalidArgument:
		class = errdefs.ErrInvalidArgument
	case codes.Unavailable:
		class = errdefs.ErrUnavailable
	case codes.Unimplemented:
		class = errdefs.ErrNotImplemented
	case codes.PermissionDenied:
		class = errdefs.ErrPermissionDenied
	case codes.DeadlineExceeded:
		class = context.DeadlineExceeded
	case codes.Canceled:
		class = context.Canceled
	default:
		return errors.New(s.Message())
	}
	msg := strings.TrimSuffix(s.Message(), ": "+class.Error())
	if msg == class.Error() || msg == "" {
		return class
	}
	return fmt.Errorf("%s: %w", msg, class)
}

// isConnectionError reports whether err says that the connection to a
// shim is closed or broken.
func isConnectionError(err error) bool {
	return errors.Is(err, ttrpc.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ENOENT)
}
