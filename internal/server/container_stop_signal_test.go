package server

import (
	"errors"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/podrequest"
)

func TestCRIStopSignal(t *testing.T) {
	for _, tc := range []struct {
		in   runtimeapi.Signal
		name string
		num  syscall.Signal
	}{
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", syscall.SIGTERM},
		{runtimeapi.Signal_SIGNAL_SIGUSR1, "SIGUSR1", syscall.SIGUSR1},
		{runtimeapi.Signal_SIGNAL_SIGINT, "SIGINT", syscall.SIGINT},
		{runtimeapi.Signal_SIGNAL_SIGKILL, "SIGKILL", syscall.SIGKILL},
		{runtimeapi.Signal_SIGNAL_SIGRTMIN, "SIGRTMIN", 34},
		{runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3, "SIGRTMIN+3", 37},
		{runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS2, "SIGRTMAX-2", 62},
		{runtimeapi.Signal_SIGNAL_SIGRTMAX, "SIGRTMAX", 64},
	} {
		name, err := podrequest.StopSignal(tc.in)
		if err != nil || name != tc.name {
			t.Errorf("podrequest.StopSignal(%s) = %q, %v; want %q", tc.in, name, err, tc.name)
			continue
		}
		sig, err := stopSignalOf(name)
		if err != nil || sig != tc.num {
			t.Errorf("stopSignalOf(%q) = %d, %v; want %d", name, sig, err, tc.num)
		}
	}
	if _, err := podrequest.StopSignal(runtimeapi.Signal(999)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unknown enum: err = %v, want InvalidArgument", err)
	}
}

// Every enum value survives the round trip to a record's name and back
// to ContainerStatus.stop_signal, aliases to their canonical name.
func TestCRISignalRoundTrip(t *testing.T) {
	alias := map[runtimeapi.Signal]runtimeapi.Signal{
		runtimeapi.Signal_SIGNAL_SIGCLD:  runtimeapi.Signal_SIGNAL_SIGCHLD,
		runtimeapi.Signal_SIGNAL_SIGIOT:  runtimeapi.Signal_SIGNAL_SIGABRT,
		runtimeapi.Signal_SIGNAL_SIGPOLL: runtimeapi.Signal_SIGNAL_SIGIO,
	}
	for v := range runtimeapi.Signal_name {
		in := runtimeapi.Signal(v)
		if in == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
			continue
		}
		name, err := podrequest.StopSignal(in)
		if err != nil {
			t.Errorf("podrequest.StopSignal(%s): %v", in, err)
			continue
		}
		want := in
		if a, ok := alias[in]; ok {
			want = a
		}
		if got := criSignal(name); got != want {
			t.Errorf("criSignal(%q) = %s, want %s", name, got, want)
		}
	}
	if got := criSignal(""); got != runtimeapi.Signal_SIGNAL_SIGTERM {
		t.Errorf("no stop signal reports %s, want SIGTERM", got)
	}
	if got := criSignal("SIGWINCH"); got != runtimeapi.Signal_SIGNAL_SIGWINCH {
		t.Errorf("image's SIGWINCH reports %s", got)
	}
}
