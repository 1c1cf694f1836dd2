package server

import (
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/idtools"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/specgen"
)

// checkUserNamespaceSupport refuses a pod user namespace on a handler that
// cannot make one.
func checkUserNamespaceSupport(handler string, features ocifeatures.Handler, u *specgen.UserNamespace) error {
	if u == nil || features.UserNamespaces {
		return nil
	}
	return fmt.Errorf("user namespaces (hostUsers: false) are not supported by runtime handler %q: it needs a runtime with idmapped mounts (runtime features mountExtensions.idmap) and kernel 5.19 or newer: %w",
		handler, errdefs.ErrInvalidArgument)
}

// rootfsIDMaps are containers/storage's form of u's mappings; nil for nil.
func rootfsIDMaps(u *specgen.UserNamespace) (uids, gids []idtools.IDMap) {
	if u == nil {
		return nil, nil
	}
	return []idtools.IDMap{{ContainerID: int(u.UIDs.ContainerID), HostID: int(u.UIDs.HostID), Size: int(u.UIDs.Size)}},
		[]idtools.IDMap{{ContainerID: int(u.GIDs.ContainerID), HostID: int(u.GIDs.HostID), Size: int(u.GIDs.Size)}}
}

// reachableFromUserNamespace lets the runtime reach a user-namespaced
// container's rootfs: it prepares the rootfs from inside the namespace, as
// the pod's root, an unprivileged host ID that root-only directories
// (podbay's root and storage dirs are 0700) shut out. Every directory
// above the rootfs gets the search bit for others where it lacks it (as
// containerd keeps its root 0711): the namespace may then reach paths it
// knows, never list them. Nothing for a container with the host's users.
func reachableFromUserNamespace(spec *specs.Spec) error {
	if spec.Linux == nil || len(spec.Linux.UIDMappings) == 0 || spec.Root == nil {
		return nil
	}
	for dir := filepath.Dir(spec.Root.Path); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("user namespace: %w", err)
		}
		if fi.Mode()&0o001 == 0 {
			if err := os.Chmod(dir, fi.Mode()|0o001); err != nil {
				return fmt.Errorf("user namespace: let the pod's root reach its rootfs: %w", err)
			}
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}
