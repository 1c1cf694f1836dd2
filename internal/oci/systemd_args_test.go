package oci

import (
	"slices"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/runtime"
)

func TestSystemdCgroupArgs(t *testing.T) {
	cfg := Config{RuntimeRoot: "/run/podbay/runc", SystemdCgroup: true}
	if got := cfg.globalArgs(); !slices.Equal(got, []string{"--root", "/run/podbay/runc", "--systemd-cgroup"}) {
		t.Errorf("global args %q", got)
	}
	args := strings.Join(conmonArgs(cfg, runtime.CreateOptions{ID: "c1", BundleDir: "/b"}), " ")
	if !strings.Contains(args, "--runtime-arg --systemd-cgroup") || !strings.Contains(args, " --systemd-cgroup") {
		t.Errorf("conmon args lack --systemd-cgroup: %s", args)
	}
	if ex := execArgs(cfg, "c1", execFiles{}); !slices.Contains(ex, "--systemd-cgroup") || slices.Index(ex, "--systemd-cgroup") > slices.Index(ex, "exec") {
		t.Errorf("exec args %q", ex)
	}
	cfg.SystemdCgroup = false
	if slices.Contains(cfg.globalArgs(), "--systemd-cgroup") || strings.Contains(strings.Join(conmonArgs(cfg, runtime.CreateOptions{ID: "c1", BundleDir: "/b"}), " "), "systemd") {
		t.Error("cgroupfs runtime gets --systemd-cgroup")
	}
}
