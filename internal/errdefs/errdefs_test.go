package errdefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"plain", errors.New("boom"), codes.Unknown},
		{"invalid", fmt.Errorf("bad name: %w", ErrInvalidArgument), codes.InvalidArgument},
		{"not found", fmt.Errorf("pod x: %w", ErrNotFound), codes.NotFound},
		{"exhausted", fmt.Errorf("too many: %w", ErrResourceExhausted), codes.ResourceExhausted},
		{"ENOSPC", syscall.ENOSPC, codes.ResourceExhausted},
		{"ENOSPC in a path error", fmt.Errorf("create bundle: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{"ENOSPC in a link error", fmt.Errorf("rename: %w", &os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{"ENOSPC in a join", errors.Join(errors.New("write record"), fmt.Errorf("x: %w", syscall.ENOSPC)), codes.ResourceExhausted},
		{"EDQUOT", fmt.Errorf("write: %w", &os.SyscallError{Syscall: "write", Err: syscall.EDQUOT}), codes.ResourceExhausted},
		{"class wins over a full disk", fmt.Errorf("%w: %w", ErrAlreadyExists, syscall.ENOSPC), codes.AlreadyExists},
		{"deadline", fmt.Errorf("runtime: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"status", status.Error(codes.Aborted, "x"), codes.Aborted},
		{"other errno", &fs.PathError{Op: "open", Path: "/x", Err: syscall.EIO}, codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Code(tc.err); got != tc.want {
				t.Errorf("Code(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestToGRPCKeepsMessage(t *testing.T) {
	err := fmt.Errorf("create sandbox x: %w", &fs.PathError{Op: "write", Path: "/var/lib/podbay/podbay.db", Err: syscall.ENOSPC})
	st := status.Convert(ToGRPC(err))
	if st.Code() != codes.ResourceExhausted || st.Message() != err.Error() {
		t.Errorf("ToGRPC = %v %q, want ResourceExhausted %q", st.Code(), st.Message(), err)
	}
}
