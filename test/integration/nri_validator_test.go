package integration

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// tolerateAnnotation is the env's [nri.default_validator]
// tolerate_missing_plugins_annotation.
const tolerateAnnotation = "podbay.test/tolerate-missing-plugins"

// TestNRIDefaultValidator: with [nri.default_validator] on, a container
// whose plugins make an adjustment the operator refused (an OCI hook, a
// namespace, a sysctl), or that a required plugin did not see, is not
// created: PermissionDenied naming the validator and the rule, nothing
// listed, no container dir left, the name free again. A pod annotated
// with the tolerate annotation is spared the required plugin; adjustments
// the rules allow (an environment variable) go through.
func TestNRIDefaultValidator(t *testing.T) {
	e, ti := newContainerEnvWith(t, envOptions{nriConfig: fmt.Sprintf(`
[nri.default_validator]
enable = true
reject_oci_hook_adjustment = true
reject_namespace_adjustment = true
reject_sysctl_adjustment = true
required_plugins = ["env-adder"]
tolerate_missing_plugins_annotation = %q
`, tolerateAnnotation)}, "busybox")
	waitNRISocket(t, e)
	busybox := ti.ref("busybox")
	pod := e.runTestPod(t, "validated")
	tolerant := e.runTestPod(t, "tolerant", withAnnotation(tolerateAnnotation, "true"))

	// The required plugin is not there yet.
	refused(t, e, pod, "c1", busybox, `required plugin "env-adder" not present`)
	id := e.createContainer(t, tolerant, containerConfig("c1", busybox, ctrCommand("sleep", "1000")))
	e.removeContainer(t, id)

	startNRIPlugin(t, e, "nri-adjuster", "-name", "env-adder", "-idx", "10", "-adjust", "env")
	waitPluginSynchronized(t, e, "env-adder")
	id = e.createContainer(t, pod, containerConfig("c1", busybox, ctrCommand("sleep", "1000")))
	if spec := e.nriSpec(t, id); !hasEnvPrefix(spec.Process.Env, "NRI_ADJUSTER=seen") {
		t.Errorf("the allowed adjustment is not in the spec: env %q", spec.Process.Env)
	}
	e.removeContainer(t, id)

	for _, tc := range []struct{ adjust, reason string }{
		{"hook", "OCI hook injection"},
		{"namespace", "namespace adjustment"},
		{"sysctl", "sysctl adjustment"},
	} {
		t.Run(tc.adjust, func(t *testing.T) {
			name := tc.adjust + "-adder"
			plugin := startNRIPlugin(t, e, "nri-adjuster", "-name", name, "-idx", "20", "-adjust", tc.adjust)
			waitPluginSynchronized(t, e, name)
			refused(t, e, pod, "c-"+tc.adjust, busybox, tc.reason)
			// Without the plugin the same container is made.
			plugin.Process.Kill() //nolint:errcheck // its cleanup kills it too
			plugin.Wait()         //nolint:errcheck
			var id string
			if err := eventually(nriPluginTimeout, func() (err error) {
				id, err = e.tryCreateContainer(rpcCtx(t), pod, containerConfig("c-"+tc.adjust, busybox, ctrCommand("sleep", "1000")))
				return err
			}); err != nil {
				t.Fatalf("CreateContainer once %s is gone: %v", name, err)
			}
			e.removeContainer(t, id)
		})
	}
	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)
	e.stopPod(t, tolerant.id)
	e.removePod(t, tolerant.id)
}

// refused creates a container that the validator must refuse for reason,
// and checks that nothing of it is left.
func refused(t *testing.T, e *env, pod testPod, name, image, reason string) {
	t.Helper()
	before := containerDirs(t, e)
	_, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig(name, image, ctrCommand("sleep", "1000")))
	if err == nil {
		t.Fatalf("CreateContainer %s succeeded; want it refused for %s", name, reason)
	}
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "nri.default_validator") || !strings.Contains(st.Message(), reason) {
		t.Errorf("CreateContainer %s: %v; want PermissionDenied naming [nri.default_validator] and %q", name, err, reason)
	}
	for _, c := range e.listContainers(t, &runtimeapi.ContainerFilter{PodSandboxId: pod.id}) {
		if c.GetMetadata().GetName() == name {
			t.Errorf("refused container %s is listed", short(c.Id))
		}
	}
	if after := containerDirs(t, e); !subsetOf(after, before) {
		t.Errorf("container dirs after the refused create: %s, before: %s", after, before)
	}
}

// waitPluginSynchronized waits until the daemon's log shows the NRI plugin
// name registered and synchronized.
func waitPluginSynchronized(t *testing.T, e *env, name string) {
	t.Helper()
	if err := eventually(nriPluginTimeout, func() error {
		for _, line := range strings.Split(e.logTail(400), "\n") {
			if strings.Contains(line, name) && strings.Contains(line, "synchronized") {
				return nil
			}
		}
		return fmt.Errorf("NRI plugin %s is not registered", name)
	}); err != nil {
		t.Fatalf("%v\n%s", err, e.logTail(60))
	}
}
