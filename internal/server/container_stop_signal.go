package server

import (
	"fmt"
	"strconv"
	"strings"
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

// criStopSignal translates ContainerConfig.stop_signal into the name a
// container record keeps ("" for RUNTIME_DEFAULT: the image's, else
// SIGTERM). An enum value this cri-api does not know is refused.
func criStopSignal(sig runtimeapi.Signal) (string, error) {
	if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return "", nil
	}
	name, ok := runtimeapi.Signal_name[int32(sig)]
	if !ok {
		return "", errInvalid(fmt.Sprintf("stop_signal %d is not a signal this runtime knows", int32(sig)))
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	// Linux's aliases, which Go's signal table names by the canonical name.
	switch name {
	case "SIGIOT":
		name = "SIGABRT"
	case "SIGPOLL":
		name = "SIGIO"
	case "SIGCLD":
		name = "SIGCHLD"
	}
	if n, ok := strings.CutPrefix(name, "SIGRTMINPLUS"); ok {
		name = "SIGRTMIN+" + n
	} else if n, ok := strings.CutPrefix(name, "SIGRTMAXMINUS"); ok {
		name = "SIGRTMAX-" + n
	}
	if _, err := signal.Parse(name); err != nil {
		return "", errInvalid(fmt.Sprintf("stop_signal %s is not a Linux signal", sig))
	}
	return name, nil
}

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
