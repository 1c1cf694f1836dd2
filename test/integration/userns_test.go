package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUserNamespacesRefused: this host's runc (1.1.5) has no idmapped
// mounts, so no handler reports user_namespaces, and a pod with
// hostUsers: false (userns_options mode POD, the kubelet's mappings) is
// refused with InvalidArgument naming the handler, leaving nothing behind
// (the leak check). A pod that asks for the host's users (mode NODE) runs.
func TestUserNamespacesRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range resp.RuntimeHandlers {
		if h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q reports user namespaces", h.Name)
		}
	}
	userns := func(u *runtimeapi.UserNamespace) podMod {
		return func(c *runtimeapi.PodSandboxConfig) { c.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u }
	}
	pod := &runtimeapi.UserNamespace{
		Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536 * 8, Length: 65536}},
		Gids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536 * 8, Length: 65536}},
	}
	_, err = e.tryRunPod(rpcCtx(t), e.podConfig("userns", userns(pod)), "")
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `runtime handler "runc"`) {
		t.Errorf("hostUsers: false pod: %v, want InvalidArgument naming handler runc", err)
	}
	// Malformed options are refused whatever the handler.
	_, err = e.tryRunPod(rpcCtx(t), e.podConfig("userns-empty", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD})), "")
	if code(err) != codes.InvalidArgument {
		t.Errorf("mode POD without mappings: %v, want InvalidArgument", err)
	}
	id := e.runPod(t, e.podConfig("host-users", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE})), "")
	e.stopAndRemove(t, id)
}

// idmapHandler is the handler the user-namespace tests run on the runc
// TestMain builds from tools/ (1.2+: idmapped mounts).
const idmapHandler = "runc-idmap"

// TestUserNamespacesIdmapped runs a hostUsers: false pod end to end on a
// handler whose runtime is runc from tools/ (its features list the idmap
// mount extension; this kernel is past 5.19): Status reports
// user_namespaces for that handler only; in a pod with the kubelet's
// mappings (container 0 → host 100000, 65536 IDs) the container's root is
// uid 0 inside and 100000 on the host, its uid_map is the pod's, a host
// path volume is idmapped (host root's file is root's inside, and root's
// file written inside is host root's), and exec runs in the same user
// namespace. Stopping and removing the pod leaves nothing (the leak check).
func TestUserNamespacesIdmapped(t *testing.T) {
	requireRoot(t)
	if runcBuildErr != nil {
		t.Fatal(runcBuildErr)
	}
	e, images := newContainerEnvWith(t, envOptions{extraRuntimes: map[string]handlerOptions{
		idmapHandler: {typ: "oci", runtime: bin(newRunc)},
	}}, "busybox")
	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"runc": false, idmapHandler: true}
	for _, h := range resp.RuntimeHandlers {
		if w, ok := want[h.Name]; ok {
			if got := h.GetFeatures().GetUserNamespaces(); got != w {
				t.Errorf("handler %q: user_namespaces %v, want %v", h.Name, got, w)
			}
			delete(want, h.Name)
		}
	}
	if len(want) > 0 {
		t.Fatalf("Status lists no handler %v: %v", want, resp.RuntimeHandlers)
	}

	const hostID, size = 100000, 65536
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "from-host"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e.podConfig("userns", withUserns(hostID, size))
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := testPod{id: e.runPod(t, cfg, idmapHandler), cfg: cfg}
	id, pid := e.runContainer(t, pod, containerConfig("c", images.ref("busybox"),
		ctrShell("sleep 600"), ctrMount(vol, "/data", false)))

	for _, f := range []string{"uid_map", "gid_map"} {
		if got := strings.Fields(e.execOutput(t, id, "cat", "/proc/self/"+f)); !slices.Equal(got, []string{"0", "100000", "65536"}) {
			t.Errorf("exec cat /proc/self/%s: %q, want 0 100000 65536", f, got)
		}
	}
	if got := strings.TrimSpace(e.execOutput(t, id, "id", "-u")); got != "0" {
		t.Errorf("exec id -u: %q, want 0", got)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, _ := strings.Cut(line, ":"); k == "Uid" || k == "Gid" {
			seen++
			// Real, effective, saved and filesystem IDs: all the host's.
			if f := strings.Fields(v); len(f) != 4 || strings.Count(v, strconv.Itoa(hostID)) != 4 {
				t.Errorf("container process %d on the host: %s, want %d four times", pid, line, hostID)
			}
		}
	}
	if seen != 2 {
		t.Errorf("/proc/%d/status has %d Uid/Gid lines, want 2", pid, seen)
	}
	if got := strings.TrimSpace(e.execOutput(t, id, "stat", "-c", "%u:%g", "/data/from-host")); got != "0:0" {
		t.Errorf("host root's file in the volume is owned by %q inside, want 0:0 (an idmapped mount)", got)
	}
	e.execOutput(t, id, "touch", "/data/from-container")
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(vol, "from-container"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the container root's file is owned by %d:%d on the host, want 0:0 (an idmapped mount)", st.Uid, st.Gid)
	}
	// The pod's /dev/shm (a mode 1777 tmpfs of the host's) is bound in a
	// user namespace too, and the container's root can write to it.
	e.execOutput(t, id, "sh", "-c", "echo u > /dev/shm/u")
	if _, info := e.status(t, pod.id); info.ShmPath == "" {
		t.Error("user-namespaced pod has no pod shm")
	} else if data, err := os.ReadFile(filepath.Join(info.ShmPath, "u")); err != nil || string(data) != "u\n" {
		t.Errorf("the container's /dev/shm/u on the host: %q, %v", data, err)
	}
	e.stopAndRemove(t, pod.id)

	// The host's network with a user namespace (user_namespaces_host_network):
	// the container sees the host's interfaces, its /sys is the host's.
	if !resp.GetFeatures().GetUserNamespacesHostNetwork() {
		t.Error("RuntimeFeatures.user_namespaces_host_network is false")
	}
	hcfg := e.podConfig("userns-hostnet", withUserns(hostID, size), func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	})
	if err := os.MkdirAll(hcfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	hpod := testPod{id: e.runPod(t, hcfg, idmapHandler), cfg: hcfg}
	hid, _ := e.runContainer(t, hpod, containerConfig("c", images.ref("busybox"), ctrShell("sleep 600")))
	if got := strings.Fields(e.execOutput(t, hid, "cat", "/proc/self/uid_map")); !slices.Equal(got, []string{"0", "100000", "65536"}) {
		t.Errorf("host-network pod: uid_map %q, want 0 100000 65536", got)
	}
	if got := strings.Fields(e.execOutput(t, hid, "ls", "/sys/class/net")); !slices.Contains(got, e.bridge) {
		t.Errorf("host-network pod: /sys/class/net %q lacks the host's bridge %s", got, e.bridge)
	}
	e.stopAndRemove(t, hpod.id)
}

// withUserns gives a pod the user namespace the kubelet asks for with
// hostUsers: false: container IDs from 0 mapped to size host IDs from
// hostID, for users and groups.
func withUserns(hostID, size uint32) podMod {
	return func(c *runtimeapi.PodSandboxConfig) {
		m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: hostID, Length: size}}
		c.Linux.SecurityContext.NamespaceOptions.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
	}
}
