package integration

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUserNamespacesRefused: this host's runc (1.1.5) has no idmapped
// mounts, so no handler reports user_namespaces, and a pod with
// hostUsers: false (userns_options mode POD, the kubelet's mappings) is
// refused with InvalidArgument naming the handler, leaving nothing behind
// (the leak check). A pod that asks for the host's users (mode NODE) runs.
func TestUserNamespacesRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range resp.RuntimeHandlers {
		if h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q reports user namespaces", h.Name)
		}
	}
	userns := func(u *runtimeapi.UserNamespace) podMod {
		return func(c *runtimeapi.PodSandboxConfig) { c.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u }
	}
	pod := &runtimeapi.UserNamespace{
		Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536 * 8, Length: 65536}},
		Gids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536 * 8, Length: 65536}},
	}
	_, err = e.tryRunPod(rpcCtx(t), e.podConfig("userns", userns(pod)), "")
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `runtime handler "runc"`) {
		t.Errorf("hostUsers: false pod: %v, want InvalidArgument naming handler runc", err)
	}
	// Malformed options are refused whatever the handler.
	_, err = e.tryRunPod(rpcCtx(t), e.podConfig("userns-empty", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD})), "")
	if code(err) != codes.InvalidArgument {
		t.Errorf("mode POD without mappings: %v, want InvalidArgument", err)
	}
	id := e.runPod(t, e.podConfig("host-users", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE})), "")
	e.stopAndRemove(t, id)
}
