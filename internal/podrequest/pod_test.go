package podrequest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
)

func podConfig() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1", Attempt: 2},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/ns_web_u1",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}},
		PortMappings: []*runtimeapi.PortMapping{
			{ContainerPort: 80, HostPort: 8080, Protocol: runtimeapi.Protocol_UDP},
			{ContainerPort: 81}, // no host port: publishes nothing
		},
		Annotations: map[string]string{annotations.IngressBandwidth: "10M", annotations.NetworkOrder: OrderAfter},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/pod1",
			Sysctls:      map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
			Resources:    &runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000},
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				RunAsUser: &runtimeapi.Int64Value{Value: 65535},
				NamespaceOptions: &runtimeapi.NamespaceOption{
					UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
						Uids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}},
						Gids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}}},
				},
			},
		},
	}
}

func TestFromSandboxConfig(t *testing.T) {
	p, err := FromSandboxConfig(podConfig(), Options{RuntimeHandler: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != Version || p.Metadata != (Metadata{"web", "ns", "u1", 2}) || p.RuntimeHandler != "runc" {
		t.Errorf("metadata: %+v", p)
	}
	if len(p.PortMappings) != 1 || p.PortMappings[0].Protocol != "udp" || p.PortMappings[0].HostPort != 8080 {
		t.Errorf("port mappings: %+v", p.PortMappings)
	}
	if p.Bandwidth == nil || p.Bandwidth.IngressRate != 10_000_000 {
		t.Errorf("bandwidth: %+v", p.Bandwidth)
	}
	if p.NetworkOrder != OrderAfter || !p.NetworkOrderFromAnnotation() {
		t.Errorf("network order %q", p.NetworkOrder)
	}
	if p.UserNS == nil || p.UserNS.UIDs.HostID != 65536 {
		t.Errorf("user namespace: %+v", p.UserNS)
	}
	if p.Resources == nil || p.Resources.CPUQuota != 50000 || p.Overhead != nil {
		t.Errorf("resources %+v, overhead %+v", p.Resources, p.Overhead)
	}
	desc := p.Sandbox()
	if !desc.HasResources || desc.CPUQuota != 50000 || desc.UserNS != p.UserNS || *desc.RunAsUser != 65535 || desc.Hostname != "web" {
		t.Errorf("sandbox description: %+v", desc)
	}

	// Stored as JSON, read back the same.
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Pod
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, p) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v", &back, p)
	}
}

func TestFromSandboxConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*runtimeapi.PodSandboxConfig)
	}{
		{"no metadata", func(c *runtimeapi.PodSandboxConfig) { c.Metadata = nil }},
		{"bad bandwidth", func(c *runtimeapi.PodSandboxConfig) { c.Annotations[annotations.IngressBandwidth] = "fast" }},
		{"user namespace mode", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Mode = runtimeapi.NamespaceMode_CONTAINER
		}},
		{"user namespace with host PID", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_NODE
		}},
		{"port out of range", func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostPort = 70000 }},
		{"network mode", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_TARGET
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := podConfig()
			tc.mod(cfg)
			if _, err := FromSandboxConfig(cfg, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("FromSandboxConfig: %v, want InvalidArgument", err)
			}
		})
	}
}

// A stored config is converted without validation: a rule added since
// must not reject a pod that already runs.
func TestFromStoredConfig(t *testing.T) {
	cfg := podConfig()
	cfg.Annotations[annotations.IngressBandwidth] = "fast"
	p := FromStoredConfig(cfg, Options{})
	if p.Bandwidth != nil || p.UserNS == nil || p.Metadata.Name != "web" {
		t.Errorf("converted: %+v", p)
	}
}

func TestFromContainerConfig(t *testing.T) {
	pod, err := FromSandboxConfig(podConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c", Attempt: 1},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		LogPath:  "c/1.log", Tty: true, Stdin: true,
	}
	c, err := FromContainerConfig(cfg, pod)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "c" || c.Attempt != 1 || !c.Tty || !c.Stdin || c.StdinOnce || c.UserNS != pod.UserNS || c.LogPath != "c/1.log" {
		t.Errorf("container: %+v", c)
	}
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}},
	}}
	if _, err := FromContainerConfig(cfg, pod); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("container asking for the host's users in a user-namespaced pod: %v, want InvalidArgument", err)
	}
}
