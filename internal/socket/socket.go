// Package socket opens the unix socket podbayd serves the CRI on.
package socket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// Listen opens the unix socket at path, replacing a stale socket file.
// The socket is bound in a private directory beside path, given mode
// 0660 there and only then renamed into place, so that it is never
// reachable with the mode the umask gave it. Closing the listener removes
// the socket.
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	private, err := os.MkdirTemp(dir, ".sock-")
	if err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return &socketListener{UnixListener: l, path: path}, nil
}

// socketListener removes its socket file when closed, as a listener of
// net.Listen("unix") does for the name it was bound to.
type socketListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}
