package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cdi"
	"github.com/podbay/podbay/internal/hooks"
	"github.com/podbay/podbay/internal/image"
)

// bundleSpec reads the OCI spec CreateContainer wrote for id.
func (e *testEnv) bundleSpec(t *testing.T, id string) *specs.Spec {
	t.Helper()
	e.rt.mu.Lock()
	bundle := e.rt.bundles[id]
	e.rt.mu.Unlock()
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	return &spec
}

func TestCreateContainerInjectsHooksAndCDIDevices(t *testing.T) {
	e := newTestEnv(t, "")
	dir := t.TempDir()
	cdiDir, hooksDir := filepath.Join(dir, "cdi"), filepath.Join(dir, "hooks")
	for _, d := range []string{cdiDir, hooksDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(cdiDir, "test.json"): `{"cdiVersion":"0.6.0","kind":"podbay.test/dev","devices":[
			{"name":"a","containerEdits":{"env":["DEV_A=1"]}},
			{"name":"b","containerEdits":{"env":["DEV_B=1"],"hooks":[{"hookName":"createRuntime","path":"/bin/cdi-hook"}]}}]}`,
		filepath.Join(hooksDir, "pod.json"): `{"version":"1.0.0","hook":{"path":"/bin/sh","args":["sh","pod"]},
			"when":{"annotations":{"^pod\\.test$":"^yes$"}},"stages":["prestart"]}`,
		filepath.Join(hooksDir, "mounts.json"): `{"version":"1.0.0","hook":{"path":"/bin/sh","args":["sh","mounts"]},
			"when":{"hasBindMounts":true},"stages":["poststop"]}`,
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	reg, err := cdi.New(ctx, []string{cdiDir})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	hm, err := hooks.New(ctx, []string{hooksDir})
	if err != nil {
		t.Fatal(err)
	}
	defer hm.Close()
	e.srv.cdi, e.srv.hooks = reg, hm

	podCfg := podConfig("web")
	podCfg.Annotations = map[string]string{"pod.test": "yes"}
	pod := e.mustRun(t, podCfg)
	if _, err := e.img.ImportFromFiles(ctx, "busybox", nil, image.ImageConfig{}); err != nil {
		t.Fatal(err)
	}

	cfg := containerConfig("gpu")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podbay.test/dev=a"}}
	cfg.Annotations = map[string]string{"cdi.k8s.io/test_claim": "podbay.test/dev=b,podbay.test/dev=a"}
	id := mustCreateIn(t, e, pod, podCfg, cfg)
	spec := e.bundleSpec(t, id)
	for _, want := range []string{"DEV_A=1", "DEV_B=1"} {
		if !slices.Contains(spec.Process.Env, want) {
			t.Errorf("env %q missing: %q", want, spec.Process.Env)
		}
	}
	// The pod's annotation matched; no bind mounts; CDI's own hook last.
	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) != 2 || spec.Hooks.CreateRuntime[0].Args[1] != "pod" ||
		spec.Hooks.CreateRuntime[1].Path != "/bin/cdi-hook" || len(spec.Hooks.Poststop) != 0 {
		t.Fatalf("hooks = %+v", spec.Hooks)
	}

	plain := containerConfig("plain")
	plain.Mounts = []*runtimeapi.Mount{{HostPath: dir, ContainerPath: "/data"}}
	otherPod := podConfig("other")
	otherID := e.mustRun(t, otherPod)
	spec = e.bundleSpec(t, mustCreateIn(t, e, otherID, otherPod, plain))
	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) != 0 || len(spec.Hooks.Poststop) != 1 || spec.Hooks.Poststop[0].Args[1] != "mounts" {
		t.Fatalf("hooks without the annotation, with a bind mount = %+v", spec.Hooks)
	}

	for _, tc := range []struct {
		name string
		mod  func(*runtimeapi.ContainerConfig)
		code codes.Code
	}{
		{"unknown device", func(c *runtimeapi.ContainerConfig) {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podbay.test/dev=nope"}}
		}, codes.NotFound},
		{"unknown annotated device", func(c *runtimeapi.ContainerConfig) {
			c.Annotations = map[string]string{"cdi.k8s.io/x": "podbay.test/other=a"}
		}, codes.NotFound},
		{"malformed name", func(c *runtimeapi.ContainerConfig) {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "gpu0"}}
		}, codes.InvalidArgument},
		{"malformed annotation", func(c *runtimeapi.ContainerConfig) {
			c.Annotations = map[string]string{"cdi.k8s.io/x": "podbay.test/dev=a,"}
		}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := containerConfig("bad-" + tc.code.String())
			tc.mod(cfg)
			_, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: otherID, Config: cfg, SandboxConfig: otherPod})
			if status.Code(err) != tc.code {
				t.Fatalf("CreateContainer: %v, want %v", err, tc.code)
			}
		})
	}

	// With CDI disabled, asking for a device is refused.
	e.srv.cdi = nil
	cfg = containerConfig("no-cdi")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podbay.test/dev=a"}}
	_, err = call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: otherID, Config: cfg, SandboxConfig: otherPod})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("CreateContainer with CDI disabled: %v", err)
	}
	// Nothing of the refused creates is left: two containers exist.
	list, err := call(e.srv, "ListContainers", e.srv.ListContainers, &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 2 {
		t.Fatalf("ListContainers = %v, %v", list, err)
	}
	if n := e.img.count(); n != 4 {
		t.Fatalf("%d root filesystems, want 4 (2 pods, 2 containers)", n)
	}
}

func mustCreateIn(t *testing.T, e *testEnv, podID string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	resp, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return resp.GetContainerId()
}
