package podrequest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
)

func validateMetadata(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return fmt.Errorf("sandbox config is required: %w", errdefs.ErrInvalidArgument)
	}
	md := cfg.GetMetadata()
	if md == nil {
		return fmt.Errorf("sandbox config metadata is required: %w", errdefs.ErrInvalidArgument)
	}
	for _, f := range []struct{ field, val string }{
		{"name", md.GetName()}, {"namespace", md.GetNamespace()}, {"uid", md.GetUid()},
	} {
		if f.val == "" {
			return fmt.Errorf("sandbox metadata %s is required: %w", f.field, errdefs.ErrInvalidArgument)
		}
		if len(f.val) > 253 || strings.ContainsAny(f.val, "/\x00") {
			return fmt.Errorf("sandbox metadata %s %q is not a valid name: %w", f.field, f.val, errdefs.ErrInvalidArgument)
		}
	}
	return CheckLogDirectory(cfg.GetLogDirectory())
}

func validateNetwork(cfg *runtimeapi.PodSandboxConfig) error {
	mode := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork()
	if mode == runtimeapi.NamespaceMode_TARGET || mode == runtimeapi.NamespaceMode_CONTAINER {
		return fmt.Errorf("network namespace mode %s is not valid for a pod: %w", mode, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validatePortMappings(pms []*runtimeapi.PortMapping) error {
	for _, pm := range pms {
		if pm.GetContainerPort() <= 0 || pm.GetContainerPort() > 65535 || pm.GetHostPort() < 0 || pm.GetHostPort() > 65535 {
			return fmt.Errorf("port mapping %d:%d is out of range: %w", pm.GetHostPort(), pm.GetContainerPort(), errdefs.ErrInvalidArgument)
		}
		// Refused here, before anything is made: CNI refuses it too, in
		// ADD and again in the DEL that undoes it, which left the pod
		// unremovable.
		if _, ok := runtimeapi.Protocol_name[int32(pm.GetProtocol())]; !ok {
			return fmt.Errorf("port mapping %d:%d has unknown protocol %d: %w", pm.GetHostPort(), pm.GetContainerPort(), pm.GetProtocol(), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckLogDirectory refuses a log directory the kubelet never sends: one
// with a NUL, a relative one (the daemon would make the containers' logs
// relative to its own working directory) or one with a ".." component
// (the kubelet's is /var/log/pods/<namespace>_<name>_<uid>, built from
// names that cannot hold a "/"). Empty is allowed: no logs.
func CheckLogDirectory(dir string) error {
	if dir == "" {
		return nil
	}
	if strings.ContainsRune(dir, 0) {
		return fmt.Errorf("log directory %q contains a NUL byte: %w", dir, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("log directory %q is not an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	if slices.Contains(strings.Split(dir, "/"), "..") {
		return fmt.Errorf("log directory %q has a \"..\" component: %w", dir, errdefs.ErrInvalidArgument)
	}
	return nil
}
