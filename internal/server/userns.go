package server

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containers/storage/pkg/idtools"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/specgen"
)

// podUserNamespace reads a pod's user namespace options (hostUsers:
// false): nil for the host's (no options, or mode NODE). Mode POD needs
// exactly one uid and one gid range, as the kubelet sends; the ranges'
// values are specgen's to check.
func podUserNamespace(opts *runtimeapi.UserNamespace) (*specgen.UserNamespace, error) {
	if opts == nil {
		return nil, nil
	}
	switch opts.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(opts.GetUids()) > 0 || len(opts.GetGids()) > 0 {
			return nil, fmt.Errorf("user namespace mode NODE with ID mappings: %w", errdefs.ErrInvalidArgument)
		}
		return nil, nil
	case runtimeapi.NamespaceMode_POD:
	default:
		return nil, fmt.Errorf("user namespace mode %s: only POD and NODE are valid: %w", opts.GetMode(), errdefs.ErrInvalidArgument)
	}
	if len(opts.GetUids()) != 1 || len(opts.GetGids()) != 1 {
		return nil, fmt.Errorf("user namespace mode POD needs one uid and one gid mapping, got %d and %d: %w",
			len(opts.GetUids()), len(opts.GetGids()), errdefs.ErrInvalidArgument)
	}
	u, g := opts.GetUids()[0], opts.GetGids()[0]
	return &specgen.UserNamespace{
		UIDs: specs.LinuxIDMapping{ContainerID: u.GetContainerId(), HostID: u.GetHostId(), Size: u.GetLength()},
		GIDs: specs.LinuxIDMapping{ContainerID: g.GetContainerId(), HostID: g.GetHostId(), Size: g.GetLength()},
	}, nil
}

// checkUserNamespaceSupport refuses a pod user namespace on a handler that
// cannot make one.
func checkUserNamespaceSupport(handler string, features ocifeatures.Handler, u *specgen.UserNamespace) error {
	if u == nil || features.UserNamespaces {
		return nil
	}
	return fmt.Errorf("user namespaces (hostUsers: false) are not supported by runtime handler %q: it needs a runtime with idmapped mounts (runtime features mountExtensions.idmap) and kernel 5.19 or newer: %w",
		handler, errdefs.ErrInvalidArgument)
}

// containerUserNamespace is the user namespace a container of the pod
// joins: the pod's. A container may repeat the pod's options (the kubelet
// does) but not ask for others.
func containerUserNamespace(sbCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (*specgen.UserNamespace, error) {
	pod := sbCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	own := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	u, err := podUserNamespace(pod)
	if err != nil {
		return nil, err
	}
	if own != nil {
		mine, err := podUserNamespace(own)
		if err != nil {
			return nil, err
		}
		if (mine == nil) != (u == nil) || (u != nil && *mine != *u) {
			return nil, fmt.Errorf("container user namespace options differ from the pod's: a container joins its pod's user namespace: %w", errdefs.ErrInvalidArgument)
		}
	}
	return u, nil
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
