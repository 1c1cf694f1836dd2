package server

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/specgen"
)

func TestSecurityProfiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *runtimeapi.SecurityProfile
		want specgen.ProfileType
	}{
		{"none is unconfined", nil, specgen.ProfileUnconfined},
		{"runtime default", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, specgen.ProfileRuntimeDefault},
		{"unconfined", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, specgen.ProfileUnconfined},
	} {
		got, err := seccompProfile(tc.in)
		if err != nil || got.Type != tc.want {
			t.Errorf("seccomp %s: %v %v, want %v", tc.name, got.Type, err, tc.want)
		}
		if got := appArmorProfile(tc.in); got.Type != tc.want {
			t.Errorf("apparmor %s: %v, want %v", tc.name, got.Type, tc.want)
		}
	}
	if _, err := seccompProfile(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "relative.json"}); err == nil {
		t.Error("relative localhost seccomp profile accepted")
	}
	if got := appArmorProfile(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/p1"}); got.Localhost != "p1" {
		t.Errorf("apparmor localhost %q", got.Localhost)
	}
}

func TestValidateContainerConfig(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "busybox"}
	md := &runtimeapi.ContainerMetadata{Name: "c"}
	sc := func(s *runtimeapi.LinuxContainerSecurityContext) *runtimeapi.LinuxContainerConfig {
		return &runtimeapi.LinuxContainerConfig{SecurityContext: s}
	}
	for _, tc := range []struct {
		name string
		cfg  *runtimeapi.ContainerConfig
		ok   bool
	}{
		{"nil", nil, false},
		{"no metadata", &runtimeapi.ContainerConfig{Image: img}, false},
		{"no image", &runtimeapi.ContainerConfig{Metadata: md}, false},
		{"absolute log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "/etc/x"}, false},
		{"escaping log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "../x"}, false},
		{"group without user", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}})}, false},
		{"group with user", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}, RunAsUser: &runtimeapi.Int64Value{Value: 1}})}, true},
		{"group with username", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}, RunAsUsername: "www-data"})}, true},
		{"plain", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "c/0.log"}, true},
	} {
		if err := validateContainerConfig(tc.cfg); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
