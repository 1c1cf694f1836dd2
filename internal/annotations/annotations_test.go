package annotations

import (
	"maps"
	"testing"
)

func TestReserved(t *testing.T) {
	for key, want := range map[string]bool{
		"org.systemd.property.ExecStartPre":                             true,
		"org.systemd.property.TimeoutStopUSec":                          true,
		"org.criu.config":                                               true,
		"org.criu":                                                      true,
		"io.kubernetes.cri.sandbox-log-directory":                       true,
		"io.kubernetes.cri.container-type":                              true,
		"io.kubernetes.cri-o.ContainerType":                             true,
		"io.kubernetes.cri-o.SandboxID":                                 true,
		"io.kubernetes.cri-o.LogPath":                                   true,
		"io.containerd.runc.v2.group":                                   true,
		"run.oci.handler":                                               true,
		"run.oci.keep_original_groups":                                  true,
		"org.opencontainers.runc.exec.isolated-cpu-affinity-transition": true,
		"podbay.io/network-order":                                       true,
		"io.kubernetes.cri":                                             true,
		"io.kubernetes.container.hash":                                  false,
		"io.kubernetes.cri-oX":                                          false,
		"org.systemd.propertyX":                                         false,
		"io.katacontainers.config.hypervisor.path":                      false, // opt-in, not reserved
		"example.com/team":                                              false,
		"kubernetes.io/ingress-bandwidth":                               false,
		"org.opencontainers.image.source":                               false,
		"run.ocifoo":                                                    false,
		"cri.sandbox.network.setup.v2":                                  false,
		"io.kubernetes.cri.sandbox-log-directoryX/../../etc":            true,
	} {
		if got := Reserved(key); got != want {
			t.Errorf("Reserved(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestAllowed(t *testing.T) {
	in := map[string]string{
		"io.katacontainers.config.hypervisor.path": "/evil",
		"io.katacontainers.config.agent.debug":     "true",
		"dev.gvisor.spec.mount.data.share":         "pod",
		"example.com/team":                         "a",
		"org.systemd.property.ExecStartPre":        "/bin/evil",
		"org.criu.config":                          "/tmp/criu.conf",
		"io.kubernetes.cri.sandbox-log-directory":  "/etc",
		"io.kubernetes.cri-o.ContainerType":        "sandbox",
		"run.oci.handler":                          "krun",
		"cdi.k8s.io/gpu":                           "vendor.com/gpu=all",
	}
	for _, tc := range []struct {
		name     string
		patterns []string
		want     []string
	}{
		{"none", nil, nil},
		{"empty", []string{}, nil},
		{"star passes no reserved or opt-in key", []string{"*"}, []string{"example.com/team"}},
		{"one family", []string{"io.katacontainers.config.agent.*"}, []string{"io.katacontainers.config.agent.debug"}},
		{"a named opt-in namespace", []string{"io.katacontainers.*"}, []string{"io.katacontainers.config.hypervisor.path", "io.katacontainers.config.agent.debug"}},
		{"gvisor mount hints", []string{"dev.gvisor.spec.mount.*"}, []string{"dev.gvisor.spec.mount.data.share"}},
		{"a glob that reaches an opt-in namespace does not open it", []string{"io.*", "dev*"}, nil},
		{"a reserved key never passes", []string{"org.*", "io.kubernetes.*", "run.oci.*", "org.systemd.property.ExecStartPre"}, nil},
		{"exact", []string{"example.com/team"}, []string{"example.com/team"}},
		{"star crosses the slash", []string{"example.com*"}, []string{"example.com/team"}},
		{"class", []string{"example.[a-z]om/t?am"}, []string{"example.com/team"}},
	} {
		got := Allowed(tc.patterns, in)
		want := map[string]string{}
		for _, k := range tc.want {
			want[k] = in[k]
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, want)
		}
	}
}

func TestReservedPattern(t *testing.T) {
	for p, want := range map[string]bool{
		"org.systemd.property.*":  true,
		"io.kubernetes.cri.*":     true,
		"io.kubernetes.cri-o.Foo": true,
		"run.oci.*":               true,
		"*":                       false,
		"org.*":                   false,
		"io.katacontainers.*":     false,
		"io.kubernetes.cri*":      false, // also matches io.kubernetes.critical-thing
	} {
		if got := ReservedPattern(p); got != want {
			t.Errorf("ReservedPattern(%q) = %v, want %v", p, got, want)
		}
	}
}
