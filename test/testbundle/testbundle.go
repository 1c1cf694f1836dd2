// Package testbundle writes OCI bundles that run a static busybox, for the
// integration tests of the runtime handlers (internal/oci, internal/shim).
package testbundle

import (
	"encoding/json"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Applets are the commands in every bundle's /bin: hard links to busybox,
// as in the official busybox image.
var Applets = []string{"busybox", "sh", "sleep", "echo", "true", "cat", "id", "printf", "stty", "dd", "env"}

// Spec returns the spec of a container that runs args with root as its
// root filesystem (relative to the bundle, or absolute): PATH=/bin, /proc,
// a tmpfs /dev, its own PID, IPC, UTS, mount and network namespaces, and
// the cgroup cgroupsPath.
func Spec(root, cgroupsPath string, args ...string) *specs.Spec {
	return &specs.Spec{
		Version: "1.0.2",
		Root:    &specs.Root{Path: root},
		Process: &specs.Process{
			Args:            args,
			Env:             []string{"PATH=/bin"},
			Cwd:             "/",
			NoNewPrivileges: true,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: cgroupsPath,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace},
			},
		},
	}
}

// Write makes dir a bundle: dir/rootfs with busybox linked in /bin as
// each of Applets (busybox must be on dir's filesystem), and config.json
// from spec.
func Write(dir, busybox string, spec *specs.Spec) error {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	for _, applet := range Applets {
		if err := os.Link(busybox, filepath.Join(rootfs, "bin", applet)); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}
