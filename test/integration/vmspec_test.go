package integration

import (
	"os"
	"os/exec"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/ocifeatures"
)

// TestVMRuntimeSpec checks what a runtime finds in the specs it is handed,
// as the runtime wrapper recorded them at create: the sandbox key as the
// network namespace (TestNetworkOrder), the io.kubernetes.cri.*
// annotations Kata reads, the pod's resource totals as Kata sizes its VM
// from them, and only the pod and container annotations the handler lets
// through: none by default, for either handler type (runtimes act on
// annotations; TestSecurityAnnotations for what never passes). Both handlers' bundles
// declare the runtime-spec version the OCI runtime says it implements
// (crun before 1.9 refuses any other; the vm handler's is the runtime its
// runc shim runs).
func TestVMRuntimeSpec(t *testing.T) {
	e, images := newContainerEnvWith(t, envOptions{extraRuntimes: map[string]handlerOptions{
		"vm-default":  {typ: "vm", defaultAnnotations: true},
		"oci-default": {typ: "oci", defaultAnnotations: true},
	}}, "busybox")
	ref := images.ref("busybox")
	out, err := exec.Command(e.runtimePath, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", e.runtimePath, err)
	}
	specVersion, err := ocifeatures.ParseSpecVersion(string(out))
	if err != nil {
		t.Fatalf("%s --version: %v: %s", e.runtimePath, err, out)
	}
	const (
		kataPod = "io.katacontainers.config.hypervisor.path"
		kataCtr = "io.katacontainers.container.resource.swappiness"
		own     = "example.com/team"
	)
	for _, tc := range []struct {
		handler string
		passed  bool
	}{
		{"vm-default", false},
		{"oci-default", false},
	} {
		t.Run(tc.handler, func(t *testing.T) {
			cfg := e.podConfig("spec-"+tc.handler, withAnnotation(kataPod, "/tmp/evil"), withAnnotation(own, "a"), withPause(),
				func(c *runtimeapi.PodSandboxConfig) {
					c.Linux.Resources = &runtimeapi.LinuxContainerResources{
						CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 256 << 20,
					}
				})
			if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
				t.Fatal(err)
			}
			pod := testPod{id: e.runPod(t, cfg, tc.handler), cfg: cfg}
			sb := e.sandboxCreateRecord(t, pod.id)
			want := map[string]string{
				"io.kubernetes.cri.container-type":        "sandbox",
				"io.kubernetes.cri.sandbox-id":            pod.id,
				"io.kubernetes.cri.sandbox-name":          cfg.Metadata.Name,
				"io.kubernetes.cri.sandbox-namespace":     cfg.Metadata.Namespace,
				"io.kubernetes.cri.sandbox-uid":           cfg.Metadata.Uid,
				"io.kubernetes.cri.sandbox-log-directory": cfg.LogDirectory,
				"io.kubernetes.cri.sandbox-cpu-period":    "100000",
				"io.kubernetes.cri.sandbox-cpu-quota":     "50000",
				"io.kubernetes.cri.sandbox-cpu-shares":    "512",
				"io.kubernetes.cri.sandbox-memory":        "268435456",
			}
			checkAnnotations(t, "sandbox", sb.Annotations, want, map[string]bool{kataPod: tc.passed, own: tc.passed})
			if sb.OCIVersion != specVersion {
				t.Errorf("sandbox's ociVersion %q, want the runtime's %q", sb.OCIVersion, specVersion)
			}
			if sb.NetNSPath != e.netnsPath(pod.id) {
				t.Errorf("sandbox's network namespace path %q, want the sandbox key %q", sb.NetNSPath, e.netnsPath(pod.id))
			}

			ctr := containerConfig("app", ref, ctrCommand("sleep", "1000"), func(c *runtimeapi.ContainerConfig) {
				c.Annotations[kataCtr] = "0"
			})
			id, _ := e.runContainer(t, pod, ctr)
			var rec *createRecord
			for _, r := range e.createRecords() {
				if r.ContainerID == id {
					rec = &r
				}
			}
			if rec == nil {
				t.Fatalf("the runtime wrapper recorded no create for container %s", short(id))
			}
			want = map[string]string{
				"io.kubernetes.cri.container-type":    "container",
				"io.kubernetes.cri.sandbox-id":        pod.id,
				"io.kubernetes.cri.sandbox-name":      cfg.Metadata.Name,
				"io.kubernetes.cri.sandbox-namespace": cfg.Metadata.Namespace,
				"io.kubernetes.cri.sandbox-uid":       cfg.Metadata.Uid,
				"io.kubernetes.cri.container-name":    "app",
				"io.kubernetes.cri.image-name":        ref,
			}
			checkAnnotations(t, "container", rec.Annotations, want, map[string]bool{kataPod: tc.passed, own: tc.passed, kataCtr: tc.passed})
			if rec.OCIVersion != specVersion {
				t.Errorf("container's ociVersion %q, want the runtime's %q", rec.OCIVersion, specVersion)
			}
			if rec.NetNSPath != e.netnsPath(pod.id) {
				t.Errorf("container's network namespace path %q, want the sandbox key %q", rec.NetNSPath, e.netnsPath(pod.id))
			}
			e.stopAndRemove(t, pod.id)
		})
	}
	e.assertNoLeaks(t)
}

// checkAnnotations compares a spec's annotations with want, and checks
// that each key of passed is there exactly when it says so.
func checkAnnotations(t *testing.T, what string, got, want map[string]string, passed map[string]bool) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s annotation %s = %q, want %q", what, k, got[k], v)
		}
	}
	for k, in := range passed {
		if _, ok := got[k]; ok != in {
			t.Errorf("%s annotation %s in the spec: %v, want %v (all: %v)", what, k, ok, in, got)
		}
	}
}
