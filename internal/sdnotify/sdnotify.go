// Package sdnotify tells systemd (or any service manager speaking the
// sd_notify(3) protocol) about the daemon's state: one datagram per state
// change to the unix datagram socket named by $NOTIFY_SOCKET. With
// Type=notify, systemd marks the unit active only on READY=1.
package sdnotify

import (
	"fmt"
	"net"
	"os"
)

const (
	// Ready says the daemon serves: start-up is complete.
	Ready = "READY=1"
	// Stopping says the daemon is shutting down.
	Stopping = "STOPPING=1"
)

// Socket is the service manager's notification socket: an absolute path,
// or a name in the abstract namespace starting with '@'. Empty sends
// nothing.
type Socket string

// FromEnv returns $NOTIFY_SOCKET and removes it from the environment. The
// socket is the daemon's alone: a runc that inherits NOTIFY_SOCKET (through
// conmon) passes it into the container and `runc start` then waits for the
// container itself to send READY=1, which a pod never does.
func FromEnv() Socket {
	s := os.Getenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("NOTIFY_SOCKET")
	return Socket(s)
}

// Notify sends state (such as Ready). It returns false and no error when s
// is empty: the daemon was not started by a service manager that wants to
// hear.
func (s Socket) Notify(state string) (bool, error) {
	if s == "" {
		return false, nil
	}
	// Go's net package turns a leading '@' into the abstract namespace's
	// leading NUL byte, as sd_notify(3) wants.
	if s[0] != '/' && s[0] != '@' {
		return false, fmt.Errorf("sd_notify: NOTIFY_SOCKET %q is neither an absolute path nor an abstract name", string(s))
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: string(s), Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sd_notify %s: %w", state, err)
	}
	return true, nil
}
