package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// shmMount is the /dev/shm line of a container's /proc/mounts: its file
// system type and options.
func (e *env) shmMount(t *testing.T, id string) (fstype, options string) {
	t.Helper()
	for _, line := range strings.Split(e.execOutput(t, id, "cat", "/proc/mounts"), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "/dev/shm" {
			fstype, options = f[2], f[3]
		}
	}
	return fstype, options
}

// hostMounted reports whether dir is a mount point in the host's (this
// process's) mount table.
func hostMounted(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// TestPodSharesShm: the containers of a pod with its own IPC namespace
// share one /dev/shm, a 64 MiB tmpfs under the state dir (<state>/shm/<id>),
// as in containerd and CRI-O, in a pod without a pause process (the
// default kind) and in one with; a host IPC pod sees the node's /dev/shm.
// shm_size sets its size. Stop unmounts the tmpfs, Remove deletes its dir; a restart keeps it
// shared (a container made after it too) and Remove after the restart
// cleans up; a daemon killed just after the mount leaves a tmpfs that the
// restart releases.
func TestPodSharesShm(t *testing.T) {
	if suiteRuntimeType == "vm" {
		t.Skip("a VM has its own /dev/shm")
	}
	e, ti := newContainerEnv(t, "busybox")
	for _, tc := range []struct {
		name, kind string
		mods       []podMod
	}{
		{"pinned", "pinned", nil},
		{"pause", "pause", []podMod{withPause()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := e.runTestPod(t, "shm-"+tc.name, tc.mods...)
			_, info := e.status(t, pod.id)
			if info.SandboxKind != tc.kind {
				t.Fatalf("sandbox kind %q, want %q", info.SandboxKind, tc.kind)
			}
			wantPath := filepath.Join(e.stateDir, "shm", pod.id)
			if info.ShmPath != wantPath || !hostMounted(t, wantPath) {
				t.Fatalf("shm path %q (mounted: %v), want %s mounted", info.ShmPath, hostMounted(t, wantPath), wantPath)
			}
			sleeper := func(name string) *runtimeapi.ContainerConfig {
				return containerConfig(name, ti.ref("busybox"), ctrCommand("sleep", "3600"))
			}
			a, _ := e.runContainer(t, pod, sleeper("a"))
			b, _ := e.runContainer(t, pod, sleeper("b"))
			for _, id := range []string{a, b} {
				// tmpfs shows no mode=1777 in its options: the default.
				fstype, opts := e.shmMount(t, id)
				mode := strings.TrimSpace(e.execOutput(t, id, "stat", "-c", "%a", "/dev/shm"))
				if fstype != "tmpfs" || !strings.Contains(opts, "size=65536k") || mode != "1777" {
					t.Errorf("container %s: /dev/shm %s %s mode %s, want a tmpfs of 65536k, mode 1777", short(id), fstype, opts, mode)
				}
			}
			e.execOutput(t, a, "sh", "-c", "echo from-a > /dev/shm/x")
			if got := strings.TrimSpace(e.execOutput(t, b, "cat", "/dev/shm/x")); got != "from-a" {
				t.Errorf("container b reads %q from /dev/shm/x, want what a wrote", got)
			}
			if data, err := os.ReadFile(filepath.Join(wantPath, "x")); err != nil || strings.TrimSpace(string(data)) != "from-a" {
				t.Errorf("the host's view of the pod shm: %q, %v", data, err)
			}
			if tc.kind == "pause" {
				spec := string(info.RuntimeSpec)
				if !strings.Contains(spec, `"source":"`+wantPath+`"`) {
					t.Errorf("the pause container's spec does not bind the pod shm: %s", spec)
				}
			}

			// A restart keeps the tmpfs and its files; a container made
			// after it binds it too.
			e.restart("")
			if !hostMounted(t, wantPath) {
				t.Fatal("after restart: pod shm not mounted")
			}
			c, _ := e.runContainer(t, pod, sleeper("c"))
			if got := strings.TrimSpace(e.execOutput(t, c, "cat", "/dev/shm/x")); got != "from-a" {
				t.Errorf("after restart: container c reads %q", got)
			}
			e.execOutput(t, c, "sh", "-c", "echo from-c > /dev/shm/y")
			if got := strings.TrimSpace(e.execOutput(t, a, "cat", "/dev/shm/y")); got != "from-c" {
				t.Errorf("after restart: container a reads %q from what c wrote", got)
			}

			e.stopPod(t, pod.id)
			if hostMounted(t, wantPath) {
				t.Error("after stop: pod shm still mounted")
			}
			e.stopPod(t, pod.id) // idempotent
			e.removePod(t, pod.id)
			if _, err := os.Stat(wantPath); !os.IsNotExist(err) {
				t.Errorf("after remove: %s: %v", wantPath, err)
			}
			e.assertNoLeaks(t)
		})
	}

	t.Run("host ipc", func(t *testing.T) {
		name := fmt.Sprintf("podbay-itest-%d", time.Now().UnixNano())
		if err := os.WriteFile(filepath.Join("/dev/shm", name), []byte("host"), 0o644); err != nil {
			t.Skipf("no host /dev/shm to share: %v", err)
		}
		t.Cleanup(func() { os.Remove(filepath.Join("/dev/shm", name)) })
		pod := e.runTestPod(t, "shm-host", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.Ipc = runtimeapi.NamespaceMode_NODE
		})
		_, info := e.status(t, pod.id)
		if info.ShmPath != "" {
			t.Errorf("host IPC pod has a pod shm %q", info.ShmPath)
		}
		if entries, _ := os.ReadDir(filepath.Join(e.stateDir, "shm")); len(entries) != 0 {
			t.Errorf("host IPC pod made a pod shm: %v", entries)
		}
		id, _ := e.runContainer(t, pod, containerConfig("h", ti.ref("busybox"), ctrCommand("sleep", "3600"),
			func(c *runtimeapi.ContainerConfig) {
				c.Linux.SecurityContext.NamespaceOptions.Ipc = runtimeapi.NamespaceMode_NODE
			}))
		if got := e.execOutput(t, id, "cat", "/dev/shm/"+name); got != "host" {
			t.Errorf("host IPC container reads %q from the host's /dev/shm", got)
		}
		e.stopAndRemove(t, pod.id)
		e.assertNoLeaks(t)
	})

	t.Run("shm_size", func(t *testing.T) {
		small, images := newContainerEnvWith(t, envOptions{topConfig: `shm_size = "8Mi"`}, "busybox")
		pod := small.runTestPod(t, "shm-small")
		id, _ := small.runContainer(t, pod, containerConfig("s", images.ref("busybox"), ctrCommand("sleep", "3600")))
		if fstype, opts := small.shmMount(t, id); fstype != "tmpfs" || !strings.Contains(opts, "size=8192k") {
			t.Errorf("shm_size 8Mi: /dev/shm %s %s, want a tmpfs of 8192k", fstype, opts)
		}
		small.stopAndRemove(t, pod.id)
	})

	// Killed just after the mount: the restarted daemon undoes the
	// half-made pod, its tmpfs included.
	t.Run("crash after mount", func(t *testing.T) {
		e.restart("run.shm=kill")
		if _, err := e.tryRunPod(rpcCtx(t), e.podConfig("shm-half-made"), ""); code(err) != codes.Unavailable {
			t.Errorf("RunPodSandbox with run.shm=kill: %v, want Unavailable (daemon gone)", err)
		}
		e.waitExit(10 * time.Second)
		entries, _ := os.ReadDir(filepath.Join(e.stateDir, "shm"))
		if len(entries) != 1 || !hostMounted(t, filepath.Join(e.stateDir, "shm", entries[0].Name())) {
			t.Errorf("pod shm at the crash: %v, want the half-made pod's, mounted", entries)
		}
		e.restart("")
		e.eventuallyNoLeaks(t, 20*time.Second)
		if entries, _ := os.ReadDir(filepath.Join(e.stateDir, "shm")); len(entries) != 0 {
			t.Errorf("pod shm dirs after the restart: %v", entries)
		}
		if pods := e.listPods(t, nil); len(pods) != 0 {
			t.Errorf("pods after the restart: %v", podIDs(pods))
		}
	})
}
