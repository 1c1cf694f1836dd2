package podrequest

import (
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/signal"
)

// StopSignal translates ContainerConfig.stop_signal into the name a
// container record keeps ("" for RUNTIME_DEFAULT: the image's, else
// SIGTERM). An enum value this cri-api does not know is refused.
func StopSignal(sig runtimeapi.Signal) (string, error) {
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
