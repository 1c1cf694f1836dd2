package server

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/signal"
)

// Real-time signal numbers as the kernel counts them, the ones
// internal/signal parses "SIGRTMIN+n" and "SIGRTMAX-n" against.
const (
	rtMin = 34
	rtMax = 64
)

// stopSignalOf is the signal StopContainer sends first: the record's
// (the container config's, else the image's), else SIGTERM.
func stopSignalOf(name string) (syscall.Signal, error) {
	if name == "" {
		return syscall.SIGTERM, nil
	}
	return signal.Parse(name)
}

// criSignal is the CRI enum for the stop signal named name, for
// ContainerStatus.stop_signal; RUNTIME_DEFAULT if it has none.
func criSignal(name string) runtimeapi.Signal {
	sig, err := stopSignalOf(name)
	if err != nil {
		return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
	}
	var enum string
	switch n := int(sig); {
	case n == rtMin:
		enum = "SIGRTMIN"
	case n > rtMin && n < rtMin+16:
		enum = "SIGRTMINPLUS" + strconv.Itoa(n-rtMin)
	case n == rtMax:
		enum = "SIGRTMAX"
	case n >= rtMin+16 && n < rtMax:
		enum = "SIGRTMAXMINUS" + strconv.Itoa(rtMax-n)
	default:
		enum = unix.SignalName(sig)
	}
	return runtimeapi.Signal(runtimeapi.Signal_value["SIGNAL_"+enum])
}
