// Package signal parses the stop signals images declare ("SIGTERM",
// "TERM", "15", "SIGRTMIN+3").
package signal

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

const (
	sigRTMin = 34
	sigRTMax = 64
)

// Parse returns the signal s names.
func Parse(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > sigRTMax {
			return 0, fmt.Errorf("signal %d out of range: %w", n, errdefs.ErrInvalidArgument)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if rest, ok := strings.CutPrefix(name, "SIGRTMIN"); ok {
		return rt(sigRTMin, rest, 1, s)
	}
	if rest, ok := strings.CutPrefix(name, "SIGRTMAX"); ok {
		return rt(sigRTMax, rest, -1, s)
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q: %w", s, errdefs.ErrInvalidArgument)
}

func rt(base int, offset string, sign int, orig string) (syscall.Signal, error) {
	if offset == "" {
		return syscall.Signal(base), nil
	}
	want := "+"
	if sign < 0 {
		want = "-"
	}
	n, err := strconv.Atoi(strings.TrimPrefix(offset, want))
	if err != nil || !strings.HasPrefix(offset, want) || n < 0 || n > sigRTMax-sigRTMin {
		return 0, fmt.Errorf("unknown signal %q: %w", orig, errdefs.ErrInvalidArgument)
	}
	return syscall.Signal(base + sign*n), nil
}
