// Package errdefs holds the error classes podbay's packages return and the
// single place where they are mapped to gRPC status codes.
package errdefs

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error classes. Wrap them with fmt.Errorf("...: %w", ErrX) to classify an
// error; the gRPC interceptor turns the class into a status code.
var (
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrNotImplemented     = errors.New("not implemented")
	// ErrResourceExhausted marks a request that failed for want of a
	// resource the host ran out of; a full disk (ENOSPC, EDQUOT) anywhere
	// in an error's chain is classified the same without it.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrInjected marks a failure produced by a configured failpoint.
	ErrInjected = errors.New("injected failure")
)

// IsNotFound reports whether err is classified as not found.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsDiskFull reports whether err is, or wraps, a write that failed because
// a file system or a quota is full (ENOSPC, EDQUOT).
func IsDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Code returns the gRPC code for err's class. An error of no class that
// wraps a full disk is ResourceExhausted, so that the kubelet and the
// operator see what to fix rather than Unknown. Errors that already carry
// a gRPC status keep their code.
func Code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, ErrNotFound):
		return codes.NotFound
	case errors.Is(err, ErrAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, ErrFailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, ErrNotImplemented):
		return codes.Unimplemented
	case errors.Is(err, ErrResourceExhausted), IsDiskFull(err):
		return codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// ToGRPC converts err into a gRPC status error carrying its class's code and
// the full message.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(Code(err), err.Error())
}
