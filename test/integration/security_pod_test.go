package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What a pod author controls and the kubelet passes on, tried against the
// CRI runtimes' published advisories. Each test checks the host, not only
// the error code.

// hostSysctls are the node's values the sysctl tests watch: none may
// change whatever a pod asks.
var hostSysctls = []string{
	"kernel/core_pattern", "kernel/domainname", "kernel/hostname", "kernel/panic",
	"kernel/shm_rmid_forced", "net/ipv4/ip_forward", "net/ipv4/ip_unprivileged_port_start",
}

func readHostSysctls(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range hostSysctls {
		out[k] = readHostFile(t, "/proc/sys/"+k)
	}
	return out
}

// TestSecuritySysctlInjection: CRI-O's CVE-2022-0811 ("cr8escape") let a
// pod's sysctl value "1+kernel.core_pattern=|/x" set the node's
// core_pattern. Here every sysctl a pod names is tried, on an oci handler
// and a vm handler (whose sysctls are not looked up on the node): values
// that smuggle a second sysctl, names that leave their namespace's
// directory by "..", "/" or "=", and sysctls of no namespace. Each is
// refused with InvalidArgument and leaves nothing, or is applied as one
// value in the pod's own namespace; the node's values stay as they were.
func TestSecuritySysctlInjection(t *testing.T) {
	handlers := map[string]handlerOptions{}
	if fileExists(shimPath()) {
		handlers["vmsec"] = handlerOptions{typ: "vm"}
	}
	e := newEnv(t, envOptions{extraRuntimes: handlers})
	e.start("")
	before := readHostSysctls(t)
	// Should a pattern ever get through, the node gets its own back.
	t.Cleanup(func() {
		for k, v := range before {
			if now, err := os.ReadFile("/proc/sys/" + k); err == nil && string(now) != v {
				_ = os.WriteFile("/proc/sys/"+k, []byte(strings.TrimSuffix(v, "\n")), 0o644)
			}
		}
	})
	marker := "/tmp/pbsec-" + randString(8)
	refused := []map[string]string{
		// Values carrying a second sysctl.
		{"net.ipv4.ip_unprivileged_port_start": "1+kernel.core_pattern=|" + marker},
		{"net.ipv4.ip_unprivileged_port_start": "1024\nkernel.core_pattern=|" + marker},
		{"kernel.shm_rmid_forced": "1\x00kernel.core_pattern=|" + marker},
		{"kernel.domainname": "x\rkernel.core_pattern=|" + marker},
		// Names leaving their directory.
		{"net.ipv4/../../kernel/core_pattern": "|" + marker},
		{"net/../kernel/core_pattern": "|" + marker},
		{"net.ipv4.conf.all/../../../../kernel/core_pattern": "|" + marker},
		{"net/ipv4/conf/all/../../../../kernel/core_pattern": "|" + marker},
		{"fs.mqueue/../../kernel/core_pattern": "|" + marker},
		{"kernel.shm_rmid_forced/../core_pattern": "|" + marker},
		{"net.ipv4.ip_forward=1,kernel.core_pattern": "|" + marker},
		{"net.ipv4.ip_forward kernel.core_pattern": "|" + marker},
		// Sysctls of no namespace of the pod's own.
		{"kernel.core_pattern": "|" + marker},
		{"kernel/core_pattern": "|" + marker},
		{"kernel.panic": "7"},
		{"vm.overcommit_memory": "1"},
		{"kernel.hostname": "pwned"},
	}
	for _, handler := range append([]string{""}, sortedKeys(handlers)...) {
		for i, sysctls := range refused {
			cfg := e.podConfig(fmt.Sprintf("sysctl-%s%d", handler, i), withSysctls(sysctls))
			id, err := e.tryRunPod(rpcCtx(t), cfg, handler)
			if err == nil {
				e.noteIDs(id)
				t.Errorf("handler %q: RunPodSandbox with sysctls %q succeeded, want InvalidArgument", handler, sysctls)
				e.stopAndRemove(t, id)
			} else if code(err) != codes.InvalidArgument {
				t.Errorf("handler %q: RunPodSandbox with sysctls %q: %v, want InvalidArgument", handler, sysctls, err)
			}
		}
		// One value, in the pod's UTS namespace: the name is namespaced,
		// and the text after "+" is part of its value, not a sysctl.
		const domain = "x+kernel.core_pattern=|/tmp/pbsec"
		cfg := e.podConfig("sysctl-ok-"+handler, withSysctls(map[string]string{"kernel.domainname": domain}))
		id := e.runPod(t, cfg, handler)
		if handler == "" {
			_, info := e.status(t, id)
			out, err := runCmd("nsenter", "--uts="+podNSPath(info, "uts"), "cat", "/proc/sys/kernel/domainname")
			if err != nil {
				t.Fatal(err)
			}
			if out != domain {
				t.Errorf("kernel.domainname in the pod = %q, want %q as one value", out, domain)
			}
		}
		e.stopAndRemove(t, id)
	}
	if got := e.listPods(t, nil); len(got) != 0 {
		t.Errorf("pods left by refused requests: %d", len(got))
	}
	after := readHostSysctls(t)
	for _, k := range hostSysctls {
		if after[k] != before[k] {
			t.Errorf("the node's %s changed: %q, was %q", k, after[k], before[k])
		}
	}
	if fileExists(marker) {
		t.Errorf("%s exists", marker)
	}
	e.assertNoLeaks(t)
}

// TestSecurityPodFileInjection: the hostname and DNS settings become
// lines of the pod's /etc/hostname, /etc/hosts and /etc/resolv.conf; a
// NUL, line break or space in one would add lines nobody asked for (a
// nameserver of the author's, a search domain). They are refused with
// InvalidArgument before anything is made; a well-formed pod's files
// hold exactly the lines asked for. The CRI has no host aliases (the
// kubelet mounts its own /etc/hosts), and podbay writes no /etc/passwd
// entry for a run_as_user the image lacks (containerd and CRI-O do not
// either; TestSecurityUIDOverflow covers the names): the container sees
// the image's file unchanged, checked in TestSecurityUIDOverflow.
func TestSecurityPodFileInjection(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	const evil = "6.6.6.6"
	for _, tc := range []struct {
		name string
		mod  podMod
	}{
		{"hostname with a newline", withHostname("ok\n" + evil + " evil")},
		{"hostname with a carriage return", withHostname("ok\r" + evil)},
		{"hostname with a NUL", withHostname("ok\x00evil")},
		{"server with a newline", withDNS([]string{"10.0.0.10\nnameserver " + evil}, nil, nil)},
		{"server with a space", withDNS([]string{"10.0.0.10 " + evil}, nil, nil)},
		{"server with a NUL", withDNS([]string{"10.0.0.10\x00" + evil}, nil, nil)},
		{"search with a newline", withDNS([]string{"10.0.0.10"}, []string{"a.example\nnameserver " + evil}, nil)},
		{"search with a tab", withDNS([]string{"10.0.0.10"}, []string{"a.example\tevil.example"}, nil)},
		{"option with a newline", withDNS([]string{"10.0.0.10"}, nil, []string{"ndots:5\nnameserver " + evil})},
		{"empty option", withDNS([]string{"10.0.0.10"}, nil, []string{""})},
	} {
		// With a pause process, whose view of the files is read.
		id, err := e.tryRunPod(rpcCtx(t), e.podConfig("files-"+randString(4), tc.mod, withPause()), "")
		if err == nil {
			e.noteIDs(id)
			_, info := e.status(t, id)
			for _, f := range []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"} {
				if c := readProcFile(t, info.Pid, f); strings.Contains(c, evil) || strings.Contains(c, "evil") {
					t.Errorf("%s: the pod's %s holds the injected text:\n%s", tc.name, f, c)
				}
			}
			t.Errorf("%s: RunPodSandbox succeeded, want InvalidArgument", tc.name)
			e.stopAndRemove(t, id)
			continue
		}
		if code(err) != codes.InvalidArgument {
			t.Errorf("%s: RunPodSandbox: %v, want InvalidArgument", tc.name, err)
		}
	}
	if got := e.listPods(t, nil); len(got) != 0 {
		t.Errorf("pods left by refused requests: %d", len(got))
	}

	// The control: exactly the lines asked for.
	id := e.runPod(t, e.podConfig("files-ok", withHostname("files-ok"), withPause(),
		withDNS([]string{"10.0.0.10", "10.0.0.11"}, []string{"a.example", "b.example"}, []string{"ndots:5", "timeout:2"})), "")
	_, info := e.status(t, id)
	want := map[string]string{
		"/etc/resolv.conf": "search a.example b.example\nnameserver 10.0.0.10\nnameserver 10.0.0.11\noptions ndots:5 timeout:2\n",
		"/etc/hostname":    "files-ok\n",
		"/etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	for f, w := range want {
		if got := readProcFile(t, info.Pid, f); got != w {
			t.Errorf("the pod's %s:\n%q\nwant exactly\n%q", f, got, w)
		}
	}
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}

// TestSecurityPathTraversal: names and paths a pod author or the kubelet
// passes that could make the daemon write outside its directories: pod
// metadata with "/", ".." or a NUL, a relative log directory or one with
// "..", a container log path with ".." or absolute, a mount's container
// path climbing out of the root and a host path that does not exist.
// Each is refused with InvalidArgument, or (a mount's container path) kept
// inside the container; no file or directory appears where the traversal
// pointed.
func TestSecurityPathTraversal(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")
	tag := "pbsec-" + randString(8)
	// Where a traversal would land: next to the env, in /tmp, at the
	// root, in the daemon's working directory.
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", e.daemonPid()))
	if err != nil {
		t.Fatal(err)
	}
	targets := []string{filepath.Join(filepath.Dir(e.dir), tag), filepath.Join("/tmp", tag), "/" + tag, filepath.Join(cwd, tag),
		filepath.Join(e.podLogDir, tag), filepath.Join(e.dir, tag), filepath.Join(e.stateDir, tag), filepath.Join(e.rootDir, tag)}
	requireNoTargets := func(what string) {
		t.Helper()
		for _, p := range targets {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s: %s appeared on the host", what, p)
				os.RemoveAll(p)
			} else if matches, _ := filepath.Glob(p + "*"); len(matches) > 0 {
				t.Errorf("%s: %v appeared on the host", what, matches)
				for _, m := range matches {
					os.RemoveAll(m)
				}
			}
		}
	}
	up := strings.Repeat("../", 12)

	t.Run("pod", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			mod  podMod
		}{
			{"name with ../", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = up + "tmp/" + tag }},
			{"namespace with ../", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Namespace = up + "tmp/" + tag }},
			{"uid with ../", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Uid = up + "tmp/" + tag }},
			{"name with /", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = "/" + tag }},
			{"name with a NUL", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = tag + "\x00x" }},
			{"uid with a NUL", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Uid = tag + "\x00x" }},
			{"relative log directory", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = tag }},
			{"log directory with ..", func(c *runtimeapi.PodSandboxConfig) {
				c.LogDirectory = filepath.Join(e.podLogDir, "x") + "/" + up + "tmp/" + tag
			}},
			{"log directory with .. to the env", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = e.podLogDir + "/../" + tag }},
		} {
			id, err := e.tryRunPod(rpcCtx(t), e.podConfig("trav-"+randString(4), tc.mod), "")
			if err == nil {
				e.noteIDs(id)
				t.Errorf("%s: RunPodSandbox succeeded, want InvalidArgument", tc.name)
				// A container's log would be made in the log directory.
				pod := testPod{id: id, cfg: e.podConfig("x", tc.mod)}
				if cid, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("trav", busybox)); err == nil {
					e.removeContainer(t, cid)
				}
				e.stopAndRemove(t, id)
			} else if code(err) != codes.InvalidArgument {
				t.Errorf("%s: RunPodSandbox: %v, want InvalidArgument", tc.name, err)
			}
			requireNoTargets(tc.name)
		}
		// ".." alone names no path here: pod directories are by ID.
		dots := e.podConfig("..", func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Namespace, c.Metadata.Uid = "..", ".." })
		if err := os.MkdirAll(dots.LogDirectory, 0o755); err != nil {
			t.Fatal(err)
		}
		if id, err := e.tryRunPod(rpcCtx(t), dots, ""); err == nil {
			e.noteIDs(id)
			e.stopAndRemove(t, id)
		} else if code(err) != codes.InvalidArgument {
			t.Errorf("pod named ..: %v, want success or InvalidArgument", err)
		}
		requireNoTargets("pod named ..")
	})

	pod := e.runTestPod(t, "trav")
	t.Run("container", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			mod  ctrMod
		}{
			{"log path with ../", func(c *runtimeapi.ContainerConfig) { c.LogPath = up + "tmp/" + tag + ".log" }},
			{"log path with ../ to the env", func(c *runtimeapi.ContainerConfig) { c.LogPath = "../../" + tag }},
			{"absolute log path", func(c *runtimeapi.ContainerConfig) { c.LogPath = filepath.Join("/tmp", tag) }},
			{"log path with a NUL", func(c *runtimeapi.ContainerConfig) { c.LogPath = tag + "\x00x" }},
			{"name with ../", func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = up + "tmp/" + tag }},
			{"missing host path", ctrMount(filepath.Join("/tmp", tag, "sub"), "/data", false)},
			{"relative host path", ctrMount(tag, "/data", false)},
			{"relative container path", ctrMount(e.podLogDir, "../"+tag, false)},
		} {
			id, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("trav-"+randString(4), busybox, ctrShell("true"), tc.mod))
			if err == nil {
				t.Errorf("%s: CreateContainer succeeded, want InvalidArgument", tc.name)
				e.startContainer(t, id)
				e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
				e.removeContainer(t, id)
			} else if code(err) != codes.InvalidArgument {
				t.Errorf("%s: CreateContainer: %v, want InvalidArgument", tc.name, err)
			}
			requireNoTargets(tc.name)
		}
		if got := e.listContainers(t, nil); len(got) != 0 {
			t.Errorf("containers left by refused requests: %v", containerIDs(got))
		}

		// A container path that climbs out of the root is taken inside
		// it (runc resolves it in the rootfs): the container writes
		// there, the host sees the write in the mounted directory only.
		src := t.TempDir()
		out := e.probeOK(t, pod, containerConfig("trav-mount", busybox,
			ctrMount(src, "/"+up+tag, false),
			ctrShell("echo inside > /"+tag+"/f && cat /"+tag+"/f")))
		if out != "inside\n" {
			t.Errorf("mount at /%s%s: container printed %q", up, tag, out)
		}
		if got := readHostFile(t, filepath.Join(src, "f")); got != "inside\n" {
			t.Errorf("the mounted directory holds %q", got)
		}
		requireNoTargets("mount climbing out of the root")
	})
	e.stopAndRemove(t, pod.id)
	requireNoTargets("the end")
	e.assertNoLeaks(t)
}
