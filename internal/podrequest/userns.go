package podrequest

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/specgen"
)

// UserNamespace reads a pod's user namespace options (hostUsers:
// false): nil for the host's (no options, or mode NODE). Mode POD needs
// exactly one uid and one gid range, as the kubelet sends; the ranges'
// values are specgen's to check.
func UserNamespace(opts *runtimeapi.UserNamespace) (*specgen.UserNamespace, error) {
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
