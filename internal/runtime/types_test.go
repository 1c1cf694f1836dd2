package runtime

import (
	"errors"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestExecOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts ExecOptions
		ok   bool
	}{
		{opts: ExecOptions{Args: []string{"true"}}, ok: true},
		{opts: ExecOptions{Args: []string{"true"}, Cwd: "/", Timeout: time.Second, Env: []string{"A=1", "B"}}, ok: true},
		{opts: ExecOptions{}},
		{opts: ExecOptions{Args: []string{""}}},
		{opts: ExecOptions{Args: []string{"true"}, Cwd: "relative"}},
		{opts: ExecOptions{Args: []string{"true"}, Timeout: -time.Second}},
		{opts: ExecOptions{Args: []string{"true"}, Env: []string{"=1"}}},
	} {
		err := tc.opts.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.opts, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("validate(%+v) = %v, not ErrInvalidArgument", tc.opts, err)
		}
	}
}
