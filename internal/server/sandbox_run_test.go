package server

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/podrequest"
)

// validateSandboxConfig is the validation of podrequest.FromSandboxConfig.
func validateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	_, err := podrequest.FromSandboxConfig(cfg, podrequest.Options{})
	return err
}

// validateSandboxConfig refuses, before anything is made, what the runtime
// would refuse only at create (found by TestCRIFuzz).
func TestValidateSandboxConfig(t *testing.T) {
	linux := func(sysctls map[string]string, ns *runtimeapi.NamespaceOption, r *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxPodSandboxConfig {
		return &runtimeapi.LinuxPodSandboxConfig{Sysctls: sysctls, Resources: r,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}}
	}
	hostNet := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	hostIPC := &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}
	for _, tc := range []struct {
		name string
		mod  func(*runtimeapi.PodSandboxConfig)
		ok   bool
	}{
		{"plain", func(*runtimeapi.PodSandboxConfig) {}, true},
		{"hostname of 65 bytes", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = strings.Repeat("h", 65) }, false},
		{"hostname with a line break", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "a\nb" }, false},
		{"long hostname on the host network is not used", func(c *runtimeapi.PodSandboxConfig) {
			c.Hostname, c.Linux = strings.Repeat("h", 65), linux(nil, hostNet, nil)
		}, true},
		{"NUL in the log directory", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = "/var/log/pods/a\x00b" }, false},
		{"relative log directory", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = "var/log/pods/x" }, false},
		{"log directory with ..", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = "/var/log/pods/../../etc" }, false},
		{"no log directory", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = "" }, true},
		{"sysctl traversing out of /proc/sys/net", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"net.ipv4/../../kernel/core_pattern": "x"}, nil, nil)
		}, false},
		{"sysctl value with a line break", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"kernel.shm_rmid_forced": "1\nkernel.core_pattern=|/x"}, nil, nil)
		}, false},
		{"65537 supplemental groups", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(nil, nil, nil)
			c.Linux.SecurityContext.SupplementalGroups = make([]int64, 65537)
		}, false},
		{"namespaced sysctls", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "kernel.shm_rmid_forced": "1"}, nil, nil)
		}, true},
		{"empty sysctl", func(c *runtimeapi.PodSandboxConfig) { c.Linux = linux(map[string]string{"": "1"}, nil, nil) }, false},
		{"sysctl of no namespace", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"kernel.panic": "1"}, nil, nil)
		}, false},
		{"kernel.hostname", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"kernel.hostname": "x"}, nil, nil)
		}, false},
		{"net sysctl on the host network", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"net.ipv4.ip_forward": "1"}, hostNet, nil)
		}, false},
		{"ipc sysctl in the host's IPC namespace", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(map[string]string{"kernel.shm_rmid_forced": "1"}, hostIPC, nil)
		}, false},
		{"pod resources", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(nil, nil, &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30})
		}, true},
		{"cpu shares over the maximum", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(nil, nil, &runtimeapi.LinuxContainerResources{CpuShares: 1 << 31})
		}, false},
		{"cpu period over 1s", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(nil, nil, &runtimeapi.LinuxContainerResources{CpuPeriod: 1<<63 - 1})
		}, false},
		{"memory limit under what runc needs", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux = linux(nil, nil, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 4096})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := podConfig("web")
			tc.mod(cfg)
			err := validateSandboxConfig(cfg)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
				t.Fatalf("validateSandboxConfig: %v, want ok=%v or an invalid argument", err, tc.ok)
			}
		})
	}
}
