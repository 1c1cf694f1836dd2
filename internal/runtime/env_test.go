package runtime

import (
	"slices"
	"testing"
)

func TestMonitorEnv(t *testing.T) {
	in := []string{
		"PATH=/usr/sbin:/usr/bin", "HOME=/root", "_OCI_SYNCPIPE=9", "_OCI_STARTPIPE=10",
		"LISTEN_PID=1", "LISTEN_FDS=2", "LISTEN_FDNAMES=a:b", "NOTIFY_SOCKET=/run/n", "XDG_RUNTIME_DIR=/run/user/0",
	}
	want := []string{"PATH=/usr/sbin:/usr/bin", "HOME=/root", "XDG_RUNTIME_DIR=/run/user/0"}
	if got := MonitorEnv(in); !slices.Equal(got, want) {
		t.Errorf("MonitorEnv = %q, want %q", got, want)
	}
}

func TestMonitorEnvDrop(t *testing.T) {
	in := []string{"PATH=/bin", "PWD=/root", "TTRPC_ADDRESS=x", "NOTIFY_SOCKET=/n", "PWDX=1"}
	want := []string{"PATH=/bin", "PWDX=1"}
	if got := MonitorEnv(in, "PWD", "TTRPC_ADDRESS"); !slices.Equal(got, want) {
		t.Errorf("MonitorEnv = %q, want %q", got, want)
	}
}
