package specgen

import (
	"fmt"
	"slices"

	"github.com/podbay/podbay/internal/errdefs"
)

// MountOptionsAllowed are the CRI Mount.mount_options (cri-api v0.36+) a
// container's bind mount takes: options that only restrict what the mount
// allows or how access times are kept. Anything else (rw over a read-only
// mount, propagation, dev or suid back on) is refused, so that no option
// is silently dropped and none widens what the kubelet asked for.
var MountOptionsAllowed = []string{
	"noexec", "nodev", "nosuid", "nosymfollow",
	"noatime", "nodiratime", "relatime", "strictatime",
}

// CheckMountOptions refuses a mount option outside MountOptionsAllowed.
func CheckMountOptions(opts []string) error {
	for _, o := range opts {
		if !slices.Contains(MountOptionsAllowed, o) {
			return fmt.Errorf("mount option %q is not supported (supported: %v): %w", o, MountOptionsAllowed, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// withMountOptions appends opts to a bind mount's options, each once.
func withMountOptions(base, opts []string) []string {
	for _, o := range opts {
		if !slices.Contains(base, o) {
			base = append(base, o)
		}
	}
	return base
}
