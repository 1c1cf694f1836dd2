package netns

import (
	"context"
	"net"
)

// Host is this host's network namespaces, handled by the package's
// functions. It lets a caller hold them behind an interface (and tests put
// a fake there); the zero value is ready to use.
type Host struct{}

// Pin is Pin.
func (Host) Pin(path string) error { return Pin(path) }

// Unmount is Unmount.
func (Host) Unmount(path string) error { return Unmount(path) }

// Remove is Remove.
func (Host) Remove(path string) error { return Remove(path) }

// IsMounted is IsMounted.
func (Host) IsMounted(path string) (bool, error) { return IsMounted(path) }

// InUse is InUse.
func (Host) InUse(path string) (bool, error) { return InUse(path) }

// List is List.
func (Host) List(dir string) ([]string, error) { return List(dir) }

// Dial is Dial.
func (Host) Dial(ctx context.Context, path, address string) (net.Conn, error) {
	return Dial(ctx, path, address)
}
