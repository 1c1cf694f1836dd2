package server

import (
	"errors"
	"math"
	"reflect"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/sandbox"
)

func TestPodBandwidth(t *testing.T) {
	const maxBurst = math.MaxUint32
	for _, tt := range []struct {
		name    string
		ann     map[string]string
		want    *network.Bandwidth
		invalid bool
	}{
		{name: "none", ann: map[string]string{"other": "x"}},
		{name: "nil map"},
		{name: "ingress", ann: map[string]string{annotations.IngressBandwidth: "10M"},
			want: &network.Bandwidth{IngressRate: 10_000_000, IngressBurst: maxBurst}},
		{name: "egress", ann: map[string]string{annotations.EgressBandwidth: "1G"},
			want: &network.Bandwidth{EgressRate: 1_000_000_000, EgressBurst: maxBurst}},
		{name: "both, binary suffix", ann: map[string]string{annotations.IngressBandwidth: "1Mi", annotations.EgressBandwidth: "2k"},
			want: &network.Bandwidth{IngressRate: 1 << 20, IngressBurst: maxBurst, EgressRate: 2000, EgressBurst: maxBurst}},
		{name: "smallest", ann: map[string]string{annotations.IngressBandwidth: "1k"},
			want: &network.Bandwidth{IngressRate: 1000, IngressBurst: maxBurst}},
		{name: "largest", ann: map[string]string{annotations.EgressBandwidth: "1P"},
			want: &network.Bandwidth{EgressRate: 1e15, EgressBurst: maxBurst}},
		{name: "not a quantity", ann: map[string]string{annotations.IngressBandwidth: "fast"}, invalid: true},
		{name: "empty", ann: map[string]string{annotations.EgressBandwidth: ""}, invalid: true},
		{name: "too small", ann: map[string]string{annotations.IngressBandwidth: "999"}, invalid: true},
		{name: "zero", ann: map[string]string{annotations.IngressBandwidth: "0"}, invalid: true},
		{name: "negative", ann: map[string]string{annotations.EgressBandwidth: "-10M"}, invalid: true},
		{name: "too large", ann: map[string]string{annotations.EgressBandwidth: "2P"}, invalid: true},
		{name: "good ingress, bad egress", ann: map[string]string{annotations.IngressBandwidth: "10M", annotations.EgressBandwidth: "10X"}, invalid: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podrequest.PodBandwidth(tt.ann)
			if tt.invalid {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("podBandwidth = %+v, %v; want ErrInvalidArgument", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("podBandwidth = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestValidateSandboxConfigBandwidth(t *testing.T) {
	cfg := func(mode runtimeapi.NamespaceMode, v string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"},
			Annotations: map[string]string{annotations.IngressBandwidth: v},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: mode},
			}},
		}
	}
	if err := validateSandboxConfig(cfg(runtimeapi.NamespaceMode_POD, "10M")); err != nil {
		t.Errorf("good value: %v", err)
	}
	if err := validateSandboxConfig(cfg(runtimeapi.NamespaceMode_POD, "10 M")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad value: %v, want ErrInvalidArgument", err)
	}
	// A host-network pod runs no CNI and is not shaped: the annotation is
	// not read, as containerd does not read it.
	if err := validateSandboxConfig(cfg(runtimeapi.NamespaceMode_NODE, "10 M")); err != nil {
		t.Errorf("bad value on a host-network pod: %v", err)
	}
}

func TestAttachmentCapabilities(t *testing.T) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"},
		Annotations: map[string]string{annotations.EgressBandwidth: "5M"},
		DnsConfig: &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10"},
			Searches: []string{"ns.svc.cluster.local", "svc.cluster.local"},
			Options:  []string{"ndots:5"},
		},
	}
	att := attachment(sandbox.Record{ID: "id1"}, podrequest.FromStoredConfig(cfg, podrequest.Options{}), "/run/netns/x")
	if want := (&network.Bandwidth{EgressRate: 5_000_000, EgressBurst: math.MaxUint32}); !reflect.DeepEqual(att.Bandwidth, want) {
		t.Errorf("Bandwidth = %+v, want %+v", att.Bandwidth, want)
	}
	want := &network.DNS{Servers: cfg.DnsConfig.Servers, Searches: cfg.DnsConfig.Searches, Options: cfg.DnsConfig.Options}
	if !reflect.DeepEqual(att.DNS, want) {
		t.Errorf("DNS = %+v, want %+v", att.DNS, want)
	}

	att = attachment(sandbox.Record{ID: "id2"}, podrequest.FromStoredConfig(&runtimeapi.PodSandboxConfig{}, podrequest.Options{}), "/run/netns/y")
	if att.Bandwidth != nil || att.DNS != nil {
		t.Errorf("pod without annotations or DNS config: Bandwidth %+v, DNS %+v; want nil, nil", att.Bandwidth, att.DNS)
	}
}
