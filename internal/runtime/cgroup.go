package runtime

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/systemd"
)

// UnitStopper stops a systemd unit, killing what is left in it; a unit
// systemd does not know counts as stopped (systemd.Manager).
type UnitStopper interface {
	StopUnit(ctx context.Context, unit string) error
}

// RemoveSpecCgroup removes the cgroup that the bundle's config.json gives
// its container (linux.cgroupsPath) in every mounted hierarchy, killing
// what is left in it. A runtime create cut short (the runtime's create
// killed between starting "runc init" and recording the container) leaves
// the cgroup, and at times a "runc init" in it, that no runtime delete
// knows of. A systemd cgroupsPath ("slice:prefix:name") names the scope
// the runtime asked systemd for: units stops it through D-Bus (nil units
// leaves it to the runtime). A bundle or cgroup that is gone counts as
// done.
func RemoveSpecCgroup(ctx context.Context, bundle string, units UnitStopper) error {
	spec, err := ReadSpec(bundle)
	if err != nil || spec.Linux == nil {
		return nil
	}
	path := spec.Linux.CgroupsPath
	if _, unit, ok := systemd.ParseSpecPath(path); ok {
		if units == nil {
			return nil
		}
		return units.StopUnit(ctx, unit)
	}
	if path == "" || strings.Contains(path, ":") || filepath.Clean("/"+path) == "/" {
		return nil
	}
	return cgroups.Remove(ctx, path)
}
