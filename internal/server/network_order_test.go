package server

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/config"
)

// A handler whose runtime reads the pod's interfaces when it boots
// (requires_network_before_start) refuses a pod that asks for network
// order "after" before anything is made, and runs it with
// allow_network_after; a pod on the node's network has no order to keep.
func TestRunPodSandboxRequiresNetworkBeforeStart(t *testing.T) {
	e := newTestEnv(t, "")
	e.runtimes["gvisor"] = e.rt
	e.runtimes["gvisor-allow"] = e.rt
	e.runtimes["gvisor-after"] = e.rt
	e.cfg.Runtimes["gvisor"] = config.Runtime{Path: "/bin/true", Type: config.TypeVM, NetworkOrder: config.OrderBefore, RequiresNetworkBeforeStart: true}
	e.cfg.Runtimes["gvisor-allow"] = config.Runtime{Path: "/bin/true", Type: config.TypeVM, NetworkOrder: config.OrderBefore,
		RequiresNetworkBeforeStart: true, AllowNetworkAfter: true}
	e.cfg.Runtimes["gvisor-after"] = config.Runtime{Path: "/bin/true", Type: config.TypeVM, NetworkOrder: config.OrderAfter,
		RequiresNetworkBeforeStart: true, AllowNetworkAfter: true}
	e.srv.Shutdown(t.Context())
	e.srv = e.newServer(t, nil)

	after := map[string]string{annotations.NetworkOrder: config.OrderAfter}
	for _, tc := range []struct {
		name        string
		handler     string
		cfg         *runtimeapi.PodSandboxConfig
		annotations map[string]string
		want        string // network order of the running pod; "" = refused
	}{
		{"default order", "gvisor", podConfig("a"), nil, "before"},
		{"annotation after refused", "gvisor", podConfig("b"), after, ""},
		{"isulad wins over after", "gvisor", podConfig("c"), map[string]string{annotations.NetworkSetupV2: "true", annotations.NetworkOrder: "after"}, "before"},
		{"host network", "gvisor", hostPodConfig("d"), after, "after"},
		{"override", "gvisor-allow", podConfig("e"), after, "after"},
		{"override handler default", "gvisor-after", podConfig("f"), nil, "after"},
		{"other handler", "runc", podConfig("g"), after, "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Annotations = tc.annotations
			e.rt.mu.Lock()
			before := len(e.rt.calls)
			e.rt.mu.Unlock()
			resp, err := call(e.srv, "RunPodSandbox", e.srv.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: tc.cfg, RuntimeHandler: tc.handler})
			if tc.want == "" {
				wantStatus(t, "RunPodSandbox with order after", err, codes.FailedPrecondition)
				msg := status.Convert(err).Message()
				for _, s := range []string{`"gvisor"`, "requires_network_before_start", annotations.NetworkOrder, "allow_network_after"} {
					if !strings.Contains(msg, s) {
						t.Errorf("message %q does not name %s", msg, s)
					}
				}
				e.rt.mu.Lock()
				calls := e.rt.calls[before:]
				e.rt.mu.Unlock()
				if len(calls) != 0 {
					t.Errorf("runtime called for a refused pod: %v", calls)
				}
				e.assertNothingHeld(t)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			id := resp.PodSandboxId
			st, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			var info sandboxInfo
			if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.NetworkOrder != tc.want {
				t.Errorf("network order %q (%v), want %q", info.NetworkOrder, err, tc.want)
			}
			if err := e.removePod(id); err != nil {
				t.Fatal(err)
			}
		})
	}
}
