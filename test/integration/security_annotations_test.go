package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// smuggled are annotations a pod author writes to act on the runtime
// stack: one key per reserved namespace, each with the attacker's value.
// None may reach an OCI spec, whatever the handler's allow-list says.
var smuggled = map[string]string{
	// runc turns these into properties of the container's systemd unit
	// (CRI-O's CVE-2024-3154) and into CRIU's configuration file.
	"org.systemd.property.ExecStartPre":    "/bin/sh -c 'touch /tmp/podbay-pwned'",
	"org.systemd.property.TimeoutStopUSec": "1",
	"org.criu.config":                      "/tmp/podbay-evil-criu.conf",
	// runc's and crun's own knobs.
	"org.opencontainers.runc.exec.isolated-cpu-affinity-transition": "temporary",
	"run.oci.handler":              "krun",
	"run.oci.keep_original_groups": "1",
	// Keys a VM runtime reads to tell a sandbox from its containers and
	// where its logs go: containerd's (podbay's own), CRI-O's and
	// containerd's internal ones.
	"io.kubernetes.cri.sandbox-log-directory": "/etc",
	"io.kubernetes.cri.sandbox-id":            "forged",
	"io.kubernetes.cri.sandbox-memory":        "1",
	"io.kubernetes.cri-o.ContainerType":       "sandbox",
	"io.kubernetes.cri-o.SandboxID":           "forged",
	"io.kubernetes.cri-o.LogPath":             "/etc/shadow",
	"io.containerd.runc.v2.group":             "forged",
	// podbay's own: read by podbay, never passed on.
	"podbay.io/network-order": "before",
}

// optedIn are annotations in the namespaces a handler opens only by
// naming them.
var optedIn = map[string]string{
	"io.katacontainers.config.hypervisor.path": "/tmp/podbay-evil-hypervisor",
	"dev.gvisor.flag.debug":                    "true",
	"module.wasm.image/variant":                "compat",
}

// TestSecurityAnnotations: a pod or container annotated with keys in the
// runtime stack's reserved namespaces gets none of them into the OCI spec
// its runtime is handed (as the runtime wrapper recorded it at create),
// for both handler types and whatever the allow-list; podbay's own keys
// carry podbay's values; the opt-in namespaces (Kata's, gVisor's, crun's
// Wasm) pass only through a pattern that names them, never through "*";
// by default no annotation passes at all.
func TestSecurityAnnotations(t *testing.T) {
	optIn := []string{"example.com/*", "io.katacontainers.*", "dev.gvisor.*", "module.wasm.image/*"}
	e, images := newContainerEnvWith(t, envOptions{extraRuntimes: map[string]handlerOptions{
		"oci-star":    {typ: "oci"},
		"vm-star":     {typ: "vm"},
		"oci-default": {typ: "oci", defaultAnnotations: true},
		"vm-default":  {typ: "vm", defaultAnnotations: true},
		"oci-opt-in":  {typ: "oci", annotations: optIn},
		"vm-opt-in":   {typ: "vm", annotations: optIn},
	}}, "busybox")
	const own = "example.com/team"
	for _, tc := range []struct {
		handler       string
		ordinary, opt bool // what passes
	}{
		{"oci-star", true, false},
		{"vm-star", true, false},
		{"oci-default", false, false},
		{"vm-default", false, false},
		{"oci-opt-in", true, true},
		{"vm-opt-in", true, true},
	} {
		t.Run(tc.handler, func(t *testing.T) {
			// With a pause process: the sandbox's spec goes to the runtime.
			cfg := e.podConfig("smuggle-"+tc.handler, withPause(), withAnnotation(own, "a"),
				withAnnotation("io.kubernetes.cri.container-type", "container"))
			for k, v := range smuggled {
				cfg.Annotations[k] = v
			}
			for k, v := range optedIn {
				cfg.Annotations[k] = v
			}
			if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
				t.Fatal(err)
			}
			pod := testPod{id: e.runPod(t, cfg, tc.handler), cfg: cfg}
			defer e.stopAndRemove(t, pod.id)
			sb := e.sandboxCreateRecord(t, pod.id)
			checkSmuggled(t, "sandbox", sb.Annotations, map[string]string{
				"io.kubernetes.cri.container-type":        "sandbox",
				"io.kubernetes.cri.sandbox-id":            pod.id,
				"io.kubernetes.cri.sandbox-log-directory": cfg.LogDirectory,
			}, tc.ordinary, tc.opt)

			ctr := containerConfig("app", images.ref("busybox"), ctrCommand("sleep", "1000"), func(c *runtimeapi.ContainerConfig) {
				for k, v := range smuggled {
					c.Annotations[k] = v
				}
				for k, v := range optedIn {
					c.Annotations[k] = v
				}
				c.Annotations["io.kubernetes.cri.container-type"] = "sandbox"
				c.Annotations["io.kubernetes.cri.image-name"] = "forged"
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
			checkSmuggled(t, "container", rec.Annotations, map[string]string{
				"io.kubernetes.cri.container-type": "container",
				"io.kubernetes.cri.sandbox-id":     pod.id,
				"io.kubernetes.cri.image-name":     images.ref("busybox"),
			}, tc.ordinary, tc.opt)
			// The host effect runc would have had: no unit property ran.
			if _, err := os.Stat("/tmp/podbay-pwned"); err == nil {
				t.Error("/tmp/podbay-pwned exists: a smuggled systemd property ran")
			}
		})
	}
}

// checkSmuggled checks a spec's annotations: podbay's own keys with
// podbay's values, no other reserved key, the opt-in keys exactly when
// opt, and the ordinary key exactly when ordinary.
func checkSmuggled(t *testing.T, what string, got, ownKeys map[string]string, ordinary, opt bool) {
	t.Helper()
	for k, v := range ownKeys {
		if got[k] != v {
			t.Errorf("%s annotation %s = %q, want podbay's %q", what, k, got[k], v)
		}
	}
	for k, v := range smuggled {
		if _, mine := ownKeys[k]; mine {
			continue
		}
		if g, ok := got[k]; ok && (g == v || !strings.HasPrefix(k, "io.kubernetes.cri.")) {
			t.Errorf("%s spec has the reserved annotation %s = %q", what, k, g)
		}
	}
	for k := range optedIn {
		if _, ok := got[k]; ok != opt {
			t.Errorf("%s spec has the opt-in annotation %s: %v, want %v", what, k, ok, opt)
		}
	}
	if _, ok := got["example.com/team"]; ok != ordinary {
		t.Errorf("%s spec has the ordinary annotation example.com/team: %v, want %v", what, ok, ordinary)
	}
}

// TestSecurityAnnotationsNRI: an NRI plugin may adjust a container's spec,
// but not set an annotation in a reserved namespace: the create fails,
// naming the key, and leaves no container behind.
func TestSecurityAnnotationsNRI(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	push(t, r, defaultSpec(t, "test", "busybox"))
	pluginDir := filepath.Join(e.dir, "nri-plugins")
	confDir := filepath.Join(e.dir, "nri-conf.d")
	for _, d := range []string{pluginDir, confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(bin("nri-logger"), filepath.Join(pluginDir, "10-smuggler"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("logFile: %s\nevents: [CreateContainer]\naddAnnotation: org.systemd.property.ExecStartPre\n", filepath.Join(e.dir, "smuggler.log"))
	if err := os.WriteFile(filepath.Join(confDir, "10-smuggler.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	e.start("")
	image := testImages{reg: r}.ref("busybox")
	e.pullImage(t, image, nil)
	pod := e.runTestPod(t, "nri-smuggle")
	defer e.stopAndRemove(t, pod.id)

	_, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("c1", image, ctrCommand("sleep", "1000")))
	if err == nil {
		t.Fatal("CreateContainer succeeded although an NRI plugin set org.systemd.property.ExecStartPre")
	}
	if !strings.Contains(err.Error(), "reserved") || !strings.Contains(err.Error(), "org.systemd.property.ExecStartPre") {
		t.Errorf("error %v does not name the reserved annotation", err)
	}
	if c := status.Code(err); c == codes.OK {
		t.Errorf("code %v", c)
	}
	if cs := e.listContainers(t, nil); len(cs) != 0 {
		t.Errorf("containers left after the refused create: %v", containerIDs(cs))
	}
	for _, r := range e.createRecords() {
		if _, ok := r.Annotations["org.systemd.property.ExecStartPre"]; ok {
			t.Errorf("the runtime was handed a spec with the plugin's reserved annotation: %s", short(r.ContainerID))
		}
	}
}
