package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listen opens a unixgram socket at name and returns a function that reads
// the next datagram.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notification: %v", err)
		}
		return string(buf[:n])
	}
}

func TestNotifyPathSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	next := listen(t, sock)
	t.Setenv("NOTIFY_SOCKET", sock)
	s := FromEnv()
	if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Fatalf("FromEnv left NOTIFY_SOCKET=%q in the environment", v)
	}
	for _, state := range []string{Ready, Stopping} {
		sent, err := s.Notify(state)
		if err != nil || !sent {
			t.Fatalf("Notify(%q) = %v, %v; want true, nil", state, sent, err)
		}
		if got := next(); got != state {
			t.Fatalf("received %q, want %q", got, state)
		}
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	name := fmt.Sprintf("@podbay-sdnotify-test-%d", os.Getpid())
	next := listen(t, name)
	t.Setenv("NOTIFY_SOCKET", name)
	if sent, err := FromEnv().Notify(Ready); err != nil || !sent {
		t.Fatalf("Notify = %v, %v; want true, nil", sent, err)
	}
	if got := next(); got != Ready {
		t.Fatalf("received %q, want %q", got, Ready)
	}
}

func TestNotifyUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := FromEnv().Notify(Ready); err != nil || sent {
		t.Fatalf("Notify with no NOTIFY_SOCKET = %v, %v; want false, nil", sent, err)
	}
}

func TestNotifyErrors(t *testing.T) {
	for _, path := range []string{"relative.sock", filepath.Join(t.TempDir(), "missing.sock")} {
		if sent, err := Socket(path).Notify(Ready); err == nil || sent {
			t.Errorf("Notify to %q = %v, %v; want an error", path, sent, err)
		}
	}
}
