package config

import (
	"strings"
	"testing"
)

func withBooted(t *testing.T, booted bool) {
	t.Helper()
	prev := systemdBooted
	systemdBooted = func() bool { return booted }
	t.Cleanup(func() { systemdBooted = prev })
}

func TestCgroupDriverResolution(t *testing.T) {
	for _, tc := range []struct {
		name          string
		booted        bool
		driver        string
		parent        string
		wantDriver    string
		wantParent    string
		wantErrSubstr string
	}{
		{name: "auto with systemd", booted: true, driver: "auto", wantDriver: "systemd", wantParent: "podbay.slice"},
		{name: "auto without systemd", booted: false, driver: "auto", wantDriver: "cgroupfs", wantParent: "/podbay"},
		{name: "cgroupfs on systemd", booted: true, driver: "cgroupfs", wantDriver: "cgroupfs", wantParent: "/podbay"},
		{name: "systemd", booted: true, driver: "systemd", parent: "kubepods.slice", wantDriver: "systemd", wantParent: "kubepods.slice"},
		{name: "systemd without systemd", booted: false, driver: "systemd", wantErrSubstr: "systemd is not PID 1"},
		{name: "systemd parent no slice", booted: true, driver: "systemd", parent: "/kubepods", wantErrSubstr: "default_cgroup_parent"},
		{name: "unknown", booted: true, driver: "sd", wantErrSubstr: "want systemd, cgroupfs or auto"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withBooted(t, tc.booted)
			c := Default()
			c.CgroupDriver = tc.driver
			if tc.parent != "" {
				c.DefaultCgroupParent = tc.parent
			}
			err := c.Validate()
			if tc.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
					t.Fatalf("Validate = %v, want an error with %q", err, tc.wantErrSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.CgroupDriver != tc.wantDriver || c.DefaultCgroupParent != tc.wantParent {
				t.Fatalf("driver %q parent %q, want %q %q", c.CgroupDriver, c.DefaultCgroupParent, tc.wantDriver, tc.wantParent)
			}
			if c.SystemdCgroup() != (tc.wantDriver == "systemd") {
				t.Fatalf("SystemdCgroup() = %v", c.SystemdCgroup())
			}
			// Resolved once: validating again keeps the result.
			if err := c.Validate(); err != nil || c.CgroupDriver != tc.wantDriver {
				t.Fatalf("second Validate: %v, driver %q", err, c.CgroupDriver)
			}
		})
	}
	withBooted(t, true)
	c := Default()
	c.CgroupDriver, c.MonitorSlice = "systemd", "system"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "monitor_slice") {
		t.Fatalf("monitor_slice not a slice: %v", err)
	}
}
