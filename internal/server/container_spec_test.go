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
