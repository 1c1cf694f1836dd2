package runtime

import (
	"slices"
	"strings"
)

// MonitorEnv returns the daemon's environment for a monitor process
// (conmon, a shim) and what it runs, without the variables that describe
// the daemon's own sync pipes, socket activation or notification socket:
// the monitor would act on them (conmon rewrites LISTEN_PID for the
// runtime), and they belong to the daemon. Variables named in drop are
// left out as well.
func MonitorEnv(environ []string, drop ...string) []string {
	env := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "_OCI_") || strings.HasPrefix(name, "LISTEN_") || name == "NOTIFY_SOCKET" ||
			slices.Contains(drop, name) {
			continue
		}
		env = append(env, kv)
	}
	return env
}
