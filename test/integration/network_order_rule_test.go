package integration

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNetworkOrderRequiredBefore: a vm handler flagged
// requires_network_before_start (containerd-shim-runc-v2 standing in for
// a runtime that reads the pod's interfaces when it boots) refuses a pod
// asking for network order "after" with FailedPrecondition and leaves
// nothing; its default pods find eth0 with the pod IP in the namespace
// when the runtime creates the sandbox; with allow_network_after the pod
// runs with the network set up after create, and a warning is logged.
func TestNetworkOrderRequiredBefore(t *testing.T) {
	const needs = "requires_network_before_start = true"
	e := newEnv(t, envOptions{extraRuntimes: map[string]handlerOptions{
		"vm-needs": {typ: "vm", extra: needs},
		"vm-allow": {typ: "vm", extra: needs + "\nallow_network_after = true"},
	}})
	e.start("")
	after := withAnnotation(podbayOrderAnnotation, "after")

	_, err := e.rt.RunPodSandbox(rpcCtx(t), &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("refused", after), RuntimeHandler: "vm-needs"})
	if code(err) != codes.FailedPrecondition {
		t.Fatalf("RunPodSandbox asking for after on vm-needs: %v, want FailedPrecondition", err)
	}
	for _, s := range []string{`"vm-needs"`, "requires_network_before_start", podbayOrderAnnotation, "allow_network_after"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Fatalf("a refused pod is listed: %v", podIDs(pods))
	}
	if rs := e.createRecords(); len(rs) != 0 {
		t.Errorf("the runtime was asked to create for a refused pod: %d records", len(rs))
	}
	e.assertNoLeaks(t)

	for _, tc := range []struct {
		name, handler string
		mods          []podMod
		want          string
	}{
		{"needs-default", "vm-needs", nil, "before"},
		{"allow-after", "vm-allow", []podMod{after}, "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := e.runPod(t, e.podConfig(tc.name, tc.mods...), tc.handler)
			st, info := e.status(t, id)
			if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || info.NetworkOrder != tc.want {
				t.Fatalf("state %v order %q, want READY %s", st.State, info.NetworkOrder, tc.want)
			}
			ip := e.requireIPInSubnet(t, podIP(st)).String()
			rec := e.sandboxCreateRecord(t, id)
			eth0, has := findIface(rec.Interfaces, "eth0")
			if tc.want == "before" && (!has || !hasAddr(eth0, ip)) {
				t.Errorf("before: no eth0 with %s at create: %s", ip, ifaceNames(rec.Interfaces))
			}
			if tc.want == "after" && has {
				t.Errorf("after: eth0 existed at create: %v", eth0.Addrs)
			}
			warned := strings.Contains(e.logTail(400), "pod network set up after its sandbox starts")
			if warned != (tc.want == "after") {
				t.Errorf("warning in podbayd's log: %v, want %v", warned, tc.want == "after")
			}
			requirePing(t, ip)
			e.stopAndRemove(t, id)
		})
	}
	e.assertNoLeaks(t)
}
