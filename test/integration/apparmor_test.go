package integration

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/apparmor"
)

// TestAppArmorDefault: where the node has AppArmor (make test-node's Debian
// 12 guest once install-deps has put apparmor_parser there), a container
// that names no profile runs under podbay-default, which podbayd loads
// itself, as one asking for the runtime default does (also through the
// deprecated string field); an unconfined one runs unconfined; a localhost
// profile the kernel does not have is refused with InvalidArgument and
// nothing is left. Skipped where the host has no AppArmor (this VM).
func TestAppArmorDefault(t *testing.T) {
	requireRoot(t)
	if !apparmor.HostSupports() {
		t.Skip("needs AppArmor in the kernel and apparmor_parser; make test-node runs it")
	}
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "aa")
	profileOf := func(name string, sc func(*runtimeapi.LinuxContainerSecurityContext)) string {
		t.Helper()
		cfg := containerConfig(name, images.ref("busybox"), ctrCommand("sleep", "1000"))
		sc(cfg.Linux.SecurityContext)
		id, _ := e.runContainer(t, pod, cfg)
		return strings.TrimSpace(e.execOutput(t, id, "cat", "/proc/self/attr/current"))
	}
	for name, tc := range map[string]struct {
		sc   func(*runtimeapi.LinuxContainerSecurityContext)
		want string
	}{
		"none": {func(*runtimeapi.LinuxContainerSecurityContext) {}, "podbay-default (enforce)"},
		"default": {func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		}, "podbay-default (enforce)"},
		"deprecated": {func(sc *runtimeapi.LinuxContainerSecurityContext) {
			//lint:ignore SA1019 the deprecated field, which older kubelets send
			sc.ApparmorProfile = "runtime/default"
		}, "podbay-default (enforce)"},
		"unconfined": {func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
		}, "unconfined"},
	} {
		if got := profileOf(name, tc.sc); got != tc.want {
			t.Errorf("container %q runs under %q, want %q", name, got, tc.want)
		}
	}
	if ok, err := apparmor.Loaded(apparmor.DefaultProfile); err != nil || !ok {
		t.Errorf("%s loaded: %v, %v", apparmor.DefaultProfile, ok, err)
	}

	cfg := containerConfig("missing", images.ref("busybox"), ctrCommand("sleep", "1000"))
	cfg.Linux.SecurityContext.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/podbay-test-no-such-profile"}
	_, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "podbay-test-no-such-profile") {
		t.Errorf("create with a profile not loaded: %v, want InvalidArgument naming it", err)
	}

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
