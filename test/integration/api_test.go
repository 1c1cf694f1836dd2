package integration

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestBadRequests: malformed requests are InvalidArgument and leave nothing
// behind; unknown IDs are NotFound for status and fine for stop/remove.
func TestBadRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	noMeta := e.podConfig("nometa")
	noMeta.Metadata = nil
	emptyName := e.podConfig("x")
	emptyName.Metadata.Name = ""
	emptyNamespace := e.podConfig("x")
	emptyNamespace.Metadata.Namespace = ""
	emptyUID := e.podConfig("x")
	emptyUID.Metadata.Uid = ""

	cases := []struct {
		name string
		req  *runtimeapi.RunPodSandboxRequest
	}{
		{"nil-config", &runtimeapi.RunPodSandboxRequest{}},
		{"no-metadata", &runtimeapi.RunPodSandboxRequest{Config: noMeta}},
		{"empty-name", &runtimeapi.RunPodSandboxRequest{Config: emptyName}},
		{"empty-namespace", &runtimeapi.RunPodSandboxRequest{Config: emptyNamespace}},
		{"empty-uid", &runtimeapi.RunPodSandboxRequest{Config: emptyUID}},
		{"unknown-handler", &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("badhandler"), RuntimeHandler: "no-such-runtime"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.rt.RunPodSandbox(rpcCtx(t), tc.req)
			if code(err) != codes.InvalidArgument {
				t.Errorf("RunPodSandbox: %v (response %v), want InvalidArgument", err, resp)
			}
			if pods := e.listPods(t, nil); len(pods) != 0 {
				t.Errorf("List after a bad request: %v", podIDs(pods))
			}
			e.assertNoLeaks(t)
		})
	}

	unknown := randHex(32)
	if _, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: unknown}); code(err) != codes.NotFound {
		t.Errorf("status of an unknown ID: %v, want NotFound", err)
	}
	if _, err := e.rt.StopPodSandbox(rpcCtx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("stop of an unknown ID: %v, want success", err)
	}
	if _, err := e.rt.RemovePodSandbox(rpcCtx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("remove of an unknown ID: %v, want success", err)
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("List: %v", podIDs(pods))
	}
	e.assertNoLeaks(t)
}

// TestRuntimeInfo checks Version, Status and UpdateRuntimeConfig.
func TestRuntimeInfo(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	v, err := e.rt.Version(rpcCtx(t), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "podbay" || v.RuntimeApiVersion != "v1" || v.RuntimeVersion == "" {
		t.Errorf("Version: name %q api %q version %q, want podbay, v1, non-empty", v.RuntimeName, v.RuntimeApiVersion, v.RuntimeVersion)
	}
	cond := e.runtimeConditions(t)
	for _, c := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		if got, ok := cond[c]; !ok || !got.Status {
			t.Errorf("condition %s: %v, want true", c, got)
		}
	}
	if _, err := e.rt.UpdateRuntimeConfig(rpcCtx(t), &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: e.subnet.String()}},
	}); err != nil {
		t.Errorf("UpdateRuntimeConfig: %v", err)
	}
}

// TestNetworkReadiness: with no CNI configuration NetworkReady is false with
// a reason; a conflist dropped in later makes it true without a restart.
func TestNetworkReadiness(t *testing.T) {
	e := newEnv(t, envOptions{emptyCNIConfDir: true})
	e.start("")

	cond := e.runtimeConditions(t)
	if !cond[runtimeapi.RuntimeReady].GetStatus() {
		t.Errorf("RuntimeReady %v, want true", cond[runtimeapi.RuntimeReady])
	}
	nr := cond[runtimeapi.NetworkReady]
	if nr == nil || nr.Status {
		t.Fatalf("NetworkReady %v with an empty CNI conf dir, want false", nr)
	}
	if nr.Reason == "" {
		t.Errorf("NetworkReady false without a reason")
	}

	e.writeCNIConfig()
	if err := eventually(20*time.Second, func() error {
		if c := e.runtimeConditions(t)[runtimeapi.NetworkReady]; c == nil || !c.Status {
			return errorf("NetworkReady still %v after the conflist was written", c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// And the network is usable.
	id := e.runPod(t, e.podConfig("late-network"), "")
	st, _ := e.status(t, id)
	e.requireIPInSubnet(t, podIP(st))
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}

func (e *env) runtimeConditions(t *testing.T) map[string]*runtimeapi.RuntimeCondition {
	t.Helper()
	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	m := map[string]*runtimeapi.RuntimeCondition{}
	for _, c := range resp.GetStatus().GetConditions() {
		m[c.Type] = c
	}
	return m
}

// TestCLI: podbay inspect and ps against the daemon.
func TestCLI(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	id := e.runPod(t, e.podConfig("cli"), "")
	st, _ := e.status(t, id)

	out, err := exec.Command(bin("podbay"), "--socket", e.sock, "inspect", id).Output()
	if err != nil {
		t.Fatalf("podbay inspect: %v\n%s", err, exitStderr(err))
	}
	info, err := decodeInspect(out)
	if err != nil {
		t.Fatalf("podbay inspect output: %v\n%s", err, out)
	}
	if info.ID != id || info.NetworkSettings.SandboxKey != e.netnsPath(id) || info.NetworkSettings.IPAddress != podIP(st) {
		t.Errorf("podbay inspect: id %q SandboxKey %q IPAddress %q, want %q %q %q", info.ID, info.NetworkSettings.SandboxKey, info.NetworkSettings.IPAddress, id, e.netnsPath(id), podIP(st))
	}

	out, err = exec.Command(bin("podbay"), "--socket", e.sock, "ps").Output()
	if err != nil {
		t.Fatalf("podbay ps: %v\n%s", err, exitStderr(err))
	}
	var row string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, id[:12]) {
			row = line
		}
	}
	if row == "" {
		t.Fatalf("podbay ps does not list %s:\n%s", short(id), out)
	}
	for _, want := range []string{"cli", testNamespace, podIP(st)} {
		if !strings.Contains(row, want) {
			t.Errorf("podbay ps row %q lacks %q", row, want)
		}
	}
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}

// decodeInspect accepts one object or an array of them.
func decodeInspect(out []byte) (sandboxInfo, error) {
	var one sandboxInfo
	trimmed := strings.TrimSpace(string(out))
	if strings.HasPrefix(trimmed, "[") {
		var many []sandboxInfo
		if err := json.Unmarshal([]byte(trimmed), &many); err != nil {
			return one, err
		}
		if len(many) != 1 {
			return one, errorf("%d documents, want 1", len(many))
		}
		return many[0], nil
	}
	err := json.Unmarshal([]byte(trimmed), &one)
	return one, err
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
