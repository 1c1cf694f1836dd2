package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRecursiveReadOnlyMounts mounts a host directory that has a tmpfs
// mounted inside it. An oci handler on this host's runc (which lists "rro")
// and kernel (≥ 5.12) reports recursive_read_only_mounts, and a recursive
// read-only mount makes the tmpfs read-only inside the container too, where
// a plain read-only one leaves it writable. A vm handler reports no such
// feature and refuses the mount.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")

	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := suiteRuntimeType == "oci"
	seen := 0
	for _, h := range resp.RuntimeHandlers {
		if h.Name == "runc" || h.Name == "" {
			seen++
			if h.GetFeatures().GetRecursiveReadOnlyMounts() != want {
				t.Errorf("handler %q (%s) features %v, want recursive_read_only_mounts %v", h.Name, suiteRuntimeType, h.GetFeatures(), want)
			}
			if h.GetFeatures().GetUserNamespaces() {
				t.Errorf("handler %q reports user namespaces; runc 1.1.5 has no idmapped mounts", h.Name)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("runtime handlers %v: want runc and the default under \"\"", resp.RuntimeHandlers)
	}

	host := t.TempDir()
	sub := filepath.Join(host, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(sub, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", sub, err)
		}
	})
	pod := e.runTestPod(t, "rro")
	defer e.stopAndRemove(t, pod.id)
	mount := func(rro bool, p runtimeapi.MountPropagation, readonly bool) ctrMod {
		return func(c *runtimeapi.ContainerConfig) {
			c.Mounts = append(c.Mounts, &runtimeapi.Mount{HostPath: host, ContainerPath: "/mnt", Readonly: readonly, RecursiveReadOnly: rro, Propagation: p})
		}
	}
	const script = `touch /mnt/top 2>&1 | grep -q "Read-only file system" && echo top-ro || echo top-rw;` +
		`if touch /mnt/sub/f 2>/dev/null; then echo sub-rw; else echo sub-ro; fi`
	private := runtimeapi.MountPropagation_PROPAGATION_PRIVATE

	if !want {
		_, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("rro", busybox, ctrShell(script), mount(true, private, true)))
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"runc"`) {
			t.Fatalf("rro mount on a vm handler: %v, want InvalidArgument naming the handler", err)
		}
		return
	}

	// Control: a plain read-only mount leaves the submount writable.
	if got := e.probeOK(t, pod, containerConfig("ro", busybox, ctrShell(script), mount(false, private, true))); got != "top-ro\nsub-rw\n" {
		t.Errorf("read-only mount: %q, want the top read-only and the tmpfs below writable", got)
	}
	if err := os.Remove(filepath.Join(sub, "f")); err != nil {
		t.Errorf("the control container's file on the host: %v", err)
	}
	id := e.createContainer(t, pod, containerConfig("rro", busybox, ctrShell(script), mount(true, private, true)))
	st, info := e.containerStatus(t, id)
	if len(st.Mounts) != 1 || !st.Mounts[0].RecursiveReadOnly || !st.Mounts[0].Readonly {
		t.Errorf("ContainerStatus mounts %v, want one recursive read-only", st.Mounts)
	}
	var spec specs.Spec
	if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == "/mnt" })
	if i < 0 || !slices.Contains(spec.Mounts[i].Options, "rro") {
		t.Errorf("OCI mounts %v: want /mnt with rro", spec.Mounts)
	}
	e.removeContainer(t, id)
	if got := e.probeOK(t, pod, containerConfig("rro2", busybox, ctrShell(script), mount(true, private, true))); got != "top-ro\nsub-ro\n" {
		t.Errorf("recursive read-only mount: %q, want the tmpfs below read-only too", got)
	}
	if _, err := os.Stat(filepath.Join(sub, "f")); err == nil {
		t.Error("the recursive read-only container wrote into the submount")
	}

	// The CRI rules: read-only, private propagation.
	for _, tc := range []struct {
		name string
		mod  ctrMod
	}{
		{"writable", mount(true, private, false)},
		{"host-to-container", mount(true, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, true)},
		{"bidirectional", mount(true, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, true)},
	} {
		if _, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("bad-"+tc.name, busybox, ctrShell(script), tc.mod)); code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
}
