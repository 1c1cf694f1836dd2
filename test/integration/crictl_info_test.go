package integration

import (
	"encoding/json"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCrictlInfo: `crictl info -o json` (the tools module's crictl) shows
// the handlers of StatusResponse at its top-level runtimeHandlers, each
// with its features, not a podbay info key of the same name put over
// them; podbay's handler configuration is under runtimeHandlerConfig, and
// the cgroup version and driver are shown.
func TestCrictlInfo(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	out, errOut, err := e.runCrictl(t, "", "info", "-o", "json")
	if err != nil {
		t.Fatalf("crictl info: %v\nstdout %q\nstderr %q", err, out, errOut)
	}
	var info struct {
		Status          map[string]any `json:"status"`
		RuntimeHandlers []struct {
			Name     string         `json:"name"`
			Features map[string]any `json:"features"`
		} `json:"runtimeHandlers"`
		RuntimeHandlerConfig map[string]struct {
			Type    string `json:"type"`
			Default bool   `json:"default"`
		} `json:"runtimeHandlerConfig"`
		CgroupVersion string `json:"cgroupVersion"`
		CgroupDriver  string `json:"cgroupDriver"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("crictl info -o json: %v\n%s", err, out)
	}

	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.RuntimeHandlers) != len(resp.RuntimeHandlers) || len(info.RuntimeHandlers) == 0 {
		t.Fatalf("crictl info runtimeHandlers %+v, Status lists %v\n%s", info.RuntimeHandlers, resp.RuntimeHandlers, out)
	}
	for i, h := range resp.RuntimeHandlers {
		got := info.RuntimeHandlers[i]
		if got.Name != h.Name || got.Features == nil {
			t.Errorf("crictl info runtimeHandlers[%d] = %+v, want %q with features", i, got, h.Name)
		}
		// crictl prints the protobuf field names.
		if rro, _ := got.Features["recursive_read_only_mounts"].(bool); rro != h.GetFeatures().GetRecursiveReadOnlyMounts() {
			t.Errorf("handler %q: crictl shows recursive_read_only_mounts %v, Status %v", h.Name, got.Features["recursive_read_only_mounts"], h.GetFeatures())
		}
	}
	if info.Status == nil {
		t.Errorf("crictl info shows no status:\n%s", out)
	}
	def, ok := info.RuntimeHandlerConfig["runc"]
	if !ok || !def.Default || def.Type == "" {
		t.Errorf("runtimeHandlerConfig %+v, want runc, the default", info.RuntimeHandlerConfig)
	}
	if info.CgroupVersion != "v1" && info.CgroupVersion != "v2" || info.CgroupDriver != "cgroupfs" && info.CgroupDriver != "systemd" {
		t.Errorf("cgroupVersion %q, cgroupDriver %q", info.CgroupVersion, info.CgroupDriver)
	}
	t.Logf("crictl info: cgroup %s (%s), handlers %+v", info.CgroupVersion, info.CgroupDriver, info.RuntimeHandlers)
	e.assertNoLeaks(t)
}
