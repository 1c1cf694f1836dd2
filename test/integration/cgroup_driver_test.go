package integration

import (
	"cmp"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/systemd"
)

// suiteCgroupDriver is PODBAY_TEST_CGROUP_DRIVER: systemd, cgroupfs or
// auto sets cgroup_driver in every env's daemon config (and, under
// systemd, makes the envs' cgroup parents slices); empty leaves the key
// out, as before the variable existed.
var suiteCgroupDriver = os.Getenv("PODBAY_TEST_CGROUP_DRIVER")

// envCgroupDriver is the env's cgroup_driver: its own, else the suite's.
func envCgroupDriver(t *testing.T, opts envOptions) string {
	t.Helper()
	driver := cmp.Or(opts.cgroupDriver, suiteCgroupDriver)
	switch driver {
	case "", systemd.DriverSystemd, systemd.DriverCgroupfs, systemd.DriverAuto:
	default:
		t.Fatalf("cgroup driver %q (PODBAY_TEST_CGROUP_DRIVER): want systemd, cgroupfs, auto or empty", driver)
	}
	return driver
}

// isSystemd reports whether a daemon with cgroup_driver = driver runs the
// systemd driver here; without the key the daemon's default, auto, counts.
func isSystemd(driver string) bool {
	switch driver {
	case systemd.DriverSystemd:
		return true
	case systemd.DriverAuto, "":
		return systemd.Booted()
	}
	return false
}

// envCgroupRoot is an env's default_cgroup_parent: /pbt-<suffix>, or
// under systemd the slice pbt<suffix>.slice (at /pbt<suffix>.slice).
func envCgroupRoot(suffix string, systemd bool) string {
	if systemd {
		return "pbt" + suffix + ".slice"
	}
	return "/pbt-" + suffix
}

// cgroupChild is a pod cgroup parent under the env's root:
// <root>/<name>, or under systemd the slice pbt<suffix>-<name>.slice.
func (e *env) cgroupChild(name string) string {
	if e.systemdCgroup {
		return strings.TrimSuffix(e.cgroupRoot, ".slice") + "-" + name + ".slice"
	}
	return e.cgroupRoot + "/" + name
}

// cgroupRootDir is the env's cgroup root as a cgroupfs path (the slice
// expanded under systemd).
func (e *env) cgroupRootDir() string { return e.parentDir(e.cgroupRoot) }

// parentDir is a pod cgroup parent as a cgroupfs path (a slice expanded
// under systemd).
func (e *env) parentDir(parent string) string {
	return systemd.Layout{Systemd: e.systemdCgroup}.ParentDir(parent)
}

// otherCgroupRoot is a valid default_cgroup_parent other than the env's.
func (e *env) otherCgroupRoot() string {
	if e.systemdCgroup {
		return strings.TrimSuffix(e.cgroupRoot, ".slice") + "moved.slice"
	}
	return e.cgroupRoot + "-moved"
}

// cgroupDriverConfig is the cgroup_driver line of the daemon's config.
func (e *env) cgroupDriverConfig() string {
	if e.cgroupDriver == "" {
		return ""
	}
	return "cgroup_driver = \"" + e.cgroupDriver + "\"\n"
}

// stopEnvSlice stops, under systemd, the env's root slice and with it the
// pod slices systemd made under it for the env's pods: systemd keeps a
// slice it made on demand active when it empties (the kubelet stops its
// pod slices itself).
func (e *env) stopEnvSlice() {
	if !e.systemdCgroup {
		return
	}
	if out, err := exec.Command("systemctl", "stop", e.cgroupRoot).CombinedOutput(); err != nil {
		e.t.Logf("systemctl stop %s: %v: %s", e.cgroupRoot, err, out)
	}
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
