package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUpdatePodSandboxResources resizes a running pod in place (KEP-1287)
// and reads the result from the host's cgroup v1 files: the pod's own
// cgroup (its cgroup parent, above the pause container and the app) gets
// the totals plus the overhead; the sandbox container gets the totals —
// for a vm handler through the shim's task Update, whose runc writes the
// pause container's cgroup on this host, with the
// io.kubernetes.cri.sandbox-* annotations recorded in its spec. A resize
// to a memory limit below the pod's usage, or with values out of range,
// fails with its code and leaves every value as it was; so does one whose
// sandbox container update the runtime refuses after the pod's cgroup was
// written (undone).
func TestUpdatePodSandboxResources(t *testing.T) {
	if pureCgroupV2() {
		t.Skip("reads cgroup v1 files; TestCgroupV2PodResize is its cgroup v2 twin")
	}
	e, images := newContainerEnv(t, "busybox")
	parent := e.cgroupChild("podresize")
	// With a pause container, whose cgroup the resize sets too
	// (TestPodWithoutPauseResize: a pod without one).
	pod := e.runTestPod(t, "resize", withCgroupParent(parent), withPause(), func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 128 << 20}
	})
	app, _ := e.runContainer(t, pod, containerConfig("app", images.ref("busybox"), ctrCommand("sleep", "1000")))

	cg := func(ctrl, dir, file string) string {
		return strings.TrimSpace(readHostFile(t, filepath.Join("/sys/fs/cgroup", ctrl, dir, file)))
	}
	pause := parent + "/podbay-" + pod.id
	check := func(when string, want map[string]string) {
		t.Helper()
		for key, v := range want {
			ctrl, rest, _ := strings.Cut(key, ":")
			dir, file := parent, rest
			if d, f, ok := strings.Cut(rest, "/"); ok && d == "pause" {
				dir, file = pause, f
			}
			if got := cg(ctrl, dir, file); got != v {
				t.Errorf("%s: %s of %s = %s, want %s", when, file, dir, got, v)
			}
		}
	}

	resize := func(res, over *runtimeapi.LinuxContainerResources) error {
		_, err := e.rt.UpdatePodSandboxResources(rpcCtx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
			PodSandboxId: pod.id, Resources: res, Overhead: over,
		})
		return err
	}
	if err := resize(
		&runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 200000, CpuShares: 1024, MemoryLimitInBytes: 256 << 20},
		&runtimeapi.LinuxContainerResources{CpuQuota: 10000, MemoryLimitInBytes: 16 << 20},
	); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	resized := map[string]string{
		"cpu:cpu.cfs_quota_us":               "210000",
		"cpu:cpu.cfs_period_us":              "100000",
		"cpu:cpu.shares":                     "1024",
		"memory:memory.limit_in_bytes":       fmt.Sprint(272 << 20),
		"cpu:pause/cpu.cfs_quota_us":         "200000",
		"memory:pause/memory.limit_in_bytes": fmt.Sprint(256 << 20),
	}
	check("after the resize", resized)

	// What the pod's status shows, and the spec a VM runtime reads; a
	// restarted daemon (SIGKILLed) reads them back.
	checkStatus := func(when string) {
		t.Helper()
		_, info := e.status(t, pod.id)
		cfg := &runtimeapi.PodSandboxConfig{}
		if err := protojson.Unmarshal(info.Config, cfg); err != nil {
			t.Fatal(err)
		}
		if r, o := cfg.GetLinux().GetResources(), cfg.GetLinux().GetOverhead(); r.GetCpuQuota() != 200000 || o.GetMemoryLimitInBytes() != 16<<20 {
			t.Errorf("%s: verbose status config: resources %v, overhead %v", when, r, o)
		}
		var spec struct {
			Annotations map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
			t.Fatal(err)
		}
		if suiteRuntimeType == "vm" {
			checkAnnotations(t, when+": sandbox", spec.Annotations, map[string]string{
				"io.kubernetes.cri.sandbox-cpu-period": "100000",
				"io.kubernetes.cri.sandbox-cpu-quota":  "200000",
				"io.kubernetes.cri.sandbox-cpu-shares": "1024",
				"io.kubernetes.cri.sandbox-memory":     fmt.Sprint(256 << 20),
			}, nil)
		}
	}
	checkStatus("after the resize")
	e.restart("")
	checkStatus("after a restart")
	check("after a restart", resized)

	// 48 MiB in the app's /dev/shm (tmpfs, charged to the app's memory
	// cgroup, inside the pod's): 16 MiB plus the 16 MiB overhead is below
	// the pod's usage.
	e.execOutput(t, app, "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1M", "count=48")
	for _, tc := range []struct {
		name string
		res  *runtimeapi.LinuxContainerResources
		code codes.Code
		msg  string
	}{
		{"below usage", &runtimeapi.LinuxContainerResources{CpuQuota: 300000, MemoryLimitInBytes: 16 << 20}, codes.FailedPrecondition, "below the current usage"},
		{"shares out of range", &runtimeapi.LinuxContainerResources{CpuShares: 1, CpuQuota: 300000}, codes.InvalidArgument, "cpu shares"},
		{"memory out of range", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 4096}, codes.InvalidArgument, "memory limit"},
	} {
		err := resize(tc.res, nil)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %s with %q", tc.name, err, tc.code, tc.msg)
		}
		check("after a refused resize ("+tc.name+")", resized)
	}
	// The runtime (for vm, the shim's runc) refuses the sandbox
	// container's update after the pod's cgroup grew: the cgroup gets its
	// old values back.
	e.failRuntime("update")
	if err := resize(&runtimeapi.LinuxContainerResources{CpuQuota: 300000, MemoryLimitInBytes: 300 << 20}, nil); err == nil {
		t.Error("resize succeeded with the runtime's update failing")
	}
	e.clearFailures()
	check("after a resize whose sandbox container update failed", resized)

	_, err := e.rt.UpdatePodSandboxResources(rpcCtx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: "0123456789abcdef0123", Resources: &runtimeapi.LinuxContainerResources{CpuQuota: 300000},
	})
	if status.Code(err) != codes.NotFound {
		t.Errorf("resize of an unknown pod: %v, want NotFound", err)
	}

	// A pod under the shared default parent has no cgroup of its own: an
	// oci handler cannot resize it.
	shared := e.runTestPod(t, "shared")
	_, err = e.rt.UpdatePodSandboxResources(rpcCtx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: shared.id, Resources: &runtimeapi.LinuxContainerResources{CpuQuota: 300000},
	})
	if suiteRuntimeType == "vm" {
		if err != nil {
			t.Errorf("resize of a vm pod under the default parent: %v", err)
		}
		if got := cg("cpu", e.cgroupRoot+"/podbay-"+shared.id, "cpu.cfs_quota_us"); got != "300000" {
			t.Errorf("the shim's sandbox container quota %s, want 300000", got)
		}
	} else if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no cgroup of its own") {
		t.Errorf("resize of an oci pod under the default parent: %v, want FailedPrecondition", err)
	}

	e.stopAndRemove(t, pod.id, shared.id)
	e.assertNoLeaks(t)
}
