package server

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/sandbox"
)

func TestOverlapNetworkAndCreate(t *testing.T) {
	cni := sandbox.Record{NetworkMode: sandbox.ModeCNI, NetworkOrder: config.OrderBefore}
	withSysctls := func(kv map[string]string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{Sysctls: kv}}
	}
	tests := []struct {
		name    string
		rec     sandbox.Record
		typ     string
		cfg     *runtimeapi.PodSandboxConfig
		overlap bool
	}{
		{"oci before", cni, config.TypeOCI, &runtimeapi.PodSandboxConfig{}, true},
		{"oci before, handler type unset", cni, "", &runtimeapi.PodSandboxConfig{}, true},
		{"oci before, kernel sysctl", cni, config.TypeOCI, withSysctls(map[string]string{"kernel.shm_rmid_forced": "1"}), true},
		{"vm before", cni, config.TypeVM, &runtimeapi.PodSandboxConfig{}, false},
		{"oci after", sandbox.Record{NetworkMode: sandbox.ModeCNI, NetworkOrder: config.OrderAfter}, config.TypeOCI, &runtimeapi.PodSandboxConfig{}, false},
		{"host network", sandbox.Record{NetworkMode: sandbox.ModeHost, NetworkOrder: config.OrderBefore}, config.TypeOCI, &runtimeapi.PodSandboxConfig{}, false},
		{"net sysctl", cni, config.TypeOCI, withSysctls(map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}), false},
		{"net sysctl, slash form", cni, config.TypeOCI, withSysctls(map[string]string{"net/ipv4/conf/eth0/forwarding": "1"}), false},
	}
	for _, tt := range tests {
		if got := overlapNetworkAndCreate(tt.rec, podsandbox.KindFor(tt.typ).Traits(), podrequest.FromStoredConfig(tt.cfg, podrequest.Options{})); got != tt.overlap {
			t.Errorf("%s: overlap %v, want %v", tt.name, got, tt.overlap)
		}
	}
}
