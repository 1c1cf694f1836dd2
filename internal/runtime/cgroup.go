package runtime

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/podbay/podbay/internal/cgroups"
)

// RemoveSpecCgroup removes the cgroup that the bundle's config.json gives
// its container (linux.cgroupsPath, cgroupfs form) in every mounted
// hierarchy, killing what is left in it. A runtime create cut short (the
// runtime's create killed between starting "runc init" and recording the
// container) leaves the cgroup, and at times a "runc init" in it, that no
// runtime delete knows of. A systemd cgroup ("slice:prefix:name") is left
// to the runtime. A bundle or cgroup that is gone counts as done.
func RemoveSpecCgroup(ctx context.Context, bundle string) error {
	spec, err := ReadSpec(bundle)
	if err != nil || spec.Linux == nil {
		return nil
	}
	path := spec.Linux.CgroupsPath
	if path == "" || strings.Contains(path, ":") || filepath.Clean("/"+path) == "/" {
		return nil
	}
	return cgroups.Remove(ctx, path)
}
