package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/runtime"
)

// UpdateSandbox changes the sandbox task's resources through the shim and
// records them and the pod's totals in its config.json.
func TestIntegrationUpdateSandbox(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	var _ runtime.SandboxUpdater = r

	quota, limit := int64(30000), int64(96<<20)
	ann := map[string]string{"io.kubernetes.cri.sandbox-cpu-quota": "30000", "io.kubernetes.cri.sandbox-memory": "100663296"}
	if err := r.UpdateSandbox(ctx, pod, &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota}, Memory: &specs.LinuxMemory{Limit: &limit}}, ann); err != nil {
		t.Fatalf("UpdateSandbox: %v", err)
	}
	bundle := filepath.Join(e.dir, "bundles", pod)
	spec, err := runtime.ReadSpec(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if res := spec.Linux.Resources; res == nil || res.CPU == nil || *res.CPU.Quota != quota || *res.Memory.Limit != limit {
		t.Errorf("config.json resources after UpdateSandbox: %+v", res)
	}
	for k, v := range ann {
		if spec.Annotations[k] != v {
			t.Errorf("config.json annotation %s = %q, want %q", k, spec.Annotations[k], v)
		}
	}
	if spec.Annotations[annotationSandboxID] != pod {
		t.Errorf("UpdateSandbox lost the spec's other annotations: %v", spec.Annotations)
	}
	// The shim's runc applied them to the sandbox's cgroup on this host
	// (cgroup v1 paths; a v2 host is checked by the config.json above).
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		return
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", testCgroupParent, pod, "cpu.cfs_quota_us"))
	if err != nil {
		t.Fatalf("read the sandbox cgroup: %v", err)
	}
	if got := strings.TrimSpace(string(b)); got != "30000" {
		t.Errorf("cgroup cpu quota %s, want 30000", got)
	}
}
