package integration

import (
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's lists for procMount Default (k8s.io/kubernetes
// pkg/securitycontext DefaultProcMountMaskedPaths and
// DefaultProcMountReadonlyPaths); for Unmasked it sends empty ones, which
// reach the runtime as no lists at all (proto3 cannot tell them apart).
var (
	kubeletMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	kubeletReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// TestProcMountUnmasked: procMount Unmasked (the kubelet allows it only
// with hostUsers: false) leaves /proc unmasked and writable-as-mounted in
// a user-namespaced pod; the kubelet's Default lists mask it there as
// anywhere; and a pod without a user namespace that sends no lists gets
// podbay's defaults, masked — an empty list never unmasks a container
// that shares the host's user namespace.
func TestProcMountUnmasked(t *testing.T) {
	requireRoot(t)
	if runcBuildErr != nil {
		t.Fatal(runcBuildErr)
	}
	e, images := newContainerEnvWith(t, envOptions{extraRuntimes: map[string]handlerOptions{
		idmapHandler: {typ: "oci", runtime: bin(newRunc)},
	}}, "busybox")
	busybox := images.ref("busybox")
	const hostID, size = 100000, 65536
	cfg := e.podConfig("procmount-userns", withUserns(hostID, size))
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	userns := testPod{id: e.runPod(t, cfg, idmapHandler), cfg: cfg}
	plain := e.runTestPod(t, "procmount-host-users")

	lists := func(masked, readonly []string) ctrMod {
		return func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.MaskedPaths = masked
			c.Linux.SecurityContext.ReadonlyPaths = readonly
		}
	}
	for _, tc := range []struct {
		name     string
		pod      testPod
		mod      ctrMod
		unmasked bool
	}{
		{"userns-default", userns, lists(kubeletMaskedPaths, kubeletReadonlyPaths), false},
		{"userns-unmasked", userns, lists([]string{}, []string{}), true},
		{"host-users-default", plain, lists(kubeletMaskedPaths, kubeletReadonlyPaths), false},
		{"host-users-empty", plain, lists([]string{}, []string{}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := e.runContainer(t, tc.pod, containerConfig(tc.name, busybox, ctrShell("sleep 600"), tc.mod))
			kind := strings.TrimSpace(e.execOutput(t, id, "stat", "-c", "%F", "/proc/timer_list"))
			sysMount := e.execOutput(t, id, "sh", "-c", "grep ' /proc/sys ' /proc/self/mountinfo || true")
			masked := kind == "character special file"
			if masked == tc.unmasked {
				t.Errorf("/proc/timer_list is a %s; want it masked (/dev/null) %v", kind, !tc.unmasked)
			}
			if readonly := strings.Contains(sysMount, " ro,") || strings.Contains(sysMount, " ro "); readonly == tc.unmasked {
				t.Errorf("/proc/sys mount %q; want a read-only bind %v", strings.TrimSpace(sysMount), !tc.unmasked)
			}
			e.stopContainer(t, id, 0)
			e.removeContainer(t, id)
		})
	}
	e.stopPod(t, userns.id)
	e.removePod(t, userns.id)
	e.stopAndRemove(t, plain.id)
}
