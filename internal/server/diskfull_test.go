package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestDiskFullCause(t *testing.T) {
	free := map[string]uint64{"/state": 8 << 10, "/root": 10 << 30, "/big": 10 << 30}
	statfs := func(dir string) (uint64, error) {
		n, ok := free[dir]
		if !ok {
			return 0, errors.New("no such file system")
		}
		return n, nil
	}
	runc := errors.New("runc create failed: unable to store init state")
	for _, tc := range []struct {
		name string
		err  error
		dirs []string
		want codes.Code
	}{
		{"nil", nil, []string{"/state"}, codes.OK},
		{"unclassified on a full disk", runc, []string{"/state", "/root"}, codes.ResourceExhausted},
		{"unclassified with room", runc, []string{"/big", "/root"}, codes.Unknown},
		{"statfs fails", runc, []string{"/gone"}, codes.Unknown},
		{"timeout stays a timeout", fmt.Errorf("create: %w", context.DeadlineExceeded), []string{"/state"}, codes.DeadlineExceeded},
		{"a class stays", fmt.Errorf("create: %w", errdefs.ErrInvalidArgument), []string{"/state"}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diskFullCause(tc.err, tc.dirs, statfs)
			if code := errdefs.Code(got); code != tc.want {
				t.Errorf("code %v, want %v (%v)", code, tc.want, got)
			}
			if tc.want == codes.ResourceExhausted && (!strings.Contains(got.Error(), "/state has 8 KiB free") || !errors.Is(got, runc)) {
				t.Errorf("error %q does not keep the runtime's and name the full directory", got)
			}
		})
	}
}
