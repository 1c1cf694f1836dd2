package config

import (
	"fmt"

	"github.com/podbay/podbay/internal/systemd"
)

// systemdBooted reports whether systemd is PID 1; tests replace it.
var systemdBooted = systemd.Booted

// defaultSystemdParent is default_cgroup_parent under the systemd driver
// when the file keeps the cgroupfs default.
const defaultSystemdParent = "podbay.slice"

// validateCgroupDriver resolves cgroup_driver "auto" and checks the cgroup
// parent and monitor slice against the driver.
func (c *Config) validateCgroupDriver() []error {
	driver, err := systemd.Resolve(c.CgroupDriver, systemdBooted)
	if err != nil {
		return []error{err}
	}
	c.CgroupDriver = driver
	var errs []error
	if driver == systemd.DriverSystemd {
		if c.DefaultCgroupParent == Default().DefaultCgroupParent {
			c.DefaultCgroupParent = defaultSystemdParent
		}
		if err := systemd.CheckSlice(c.DefaultCgroupParent); err != nil {
			errs = append(errs, fmt.Errorf("default_cgroup_parent under the systemd driver: %w", err))
		}
		if err := systemd.CheckSlice(c.MonitorSlice); err != nil {
			errs = append(errs, fmt.Errorf("monitor_slice: %w", err))
		}
	}
	return errs
}

// SystemdCgroup reports whether the (validated) configuration runs the
// systemd cgroup driver.
func (c *Config) SystemdCgroup() bool { return c.CgroupDriver == systemd.DriverSystemd }
