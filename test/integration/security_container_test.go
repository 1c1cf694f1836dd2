package integration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// capSysAdmin is CAP_SYS_ADMIN's bit (linux/capability.h).
const capSysAdmin = 21

// procStatusCaps reads the Cap* lines of a /proc/<pid>/status text.
func procStatusCaps(t *testing.T, status string) map[string]uint64 {
	t.Helper()
	caps := map[string]uint64{}
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(k, "Cap") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		caps[k] = n
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if _, ok := caps[k]; !ok {
			t.Fatalf("no %s in\n%s", k, status)
		}
	}
	return caps
}

// specCapabilities is the capability part of a container's OCI spec.
type specCapabilities struct {
	Process struct {
		Capabilities map[string][]string `json:"capabilities"`
	} `json:"process"`
}

// TestSecurityCapabilities: runc's and moby's CVE-2022-24769 gave
// containers inheritable capabilities, which a program with file
// capabilities could then raise into its permitted set past what the pod
// was given. Every container here, default or with added capabilities,
// root or not, has an empty inheritable and ambient set — in its spec,
// in its process as the host sees it (/proc/<pid>/status) and in an
// exec'd process — and its bounding set holds no more than it asked for.
// A privileged container is the control: it gets every capability in
// its bounding set (and its inheritable set is shown, not required).
func TestSecurityCapabilities(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")
	pod := e.runTestPod(t, "caps")
	for _, tc := range []struct {
		name string
		mods []ctrMod
		bnd  uint64 // the bounding set it must stay within
	}{
		{"default", nil, defaultCapMask},
		{"add-sys-admin-net-admin", []ctrMod{ctrCapabilities([]string{"SYS_ADMIN", "NET_ADMIN"}, nil)}, defaultCapMask | 1<<capNetAdmin | 1<<capSysAdmin},
		{"add-all", []ctrMod{ctrCapabilities([]string{"ALL"}, nil)}, 1<<64 - 1},
		{"non-root-add-net-admin", []ctrMod{ctrRunAsUser(1000), ctrCapabilities([]string{"NET_ADMIN"}, nil)}, defaultCapMask | 1<<capNetAdmin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := e.runContainer(t, pod, containerConfig("caps-"+tc.name, busybox, append(tc.mods, ctrCommand("sleep", "1000"))...))
			defer e.removeContainer(t, id)
			_, info := e.containerStatus(t, id)
			var spec specCapabilities
			if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
				t.Fatal(err)
			}
			for _, set := range []string{"inheritable", "ambient"} {
				if got := spec.Process.Capabilities[set]; len(got) != 0 {
					t.Errorf("spec: %s capabilities %v, want none", set, got)
				}
			}
			for what, status := range map[string]string{
				"container process (from the host)": readHostFile(t, fmt.Sprintf("/proc/%d/status", info.Pid)),
				"exec'd process":                    e.execOutput(t, id, "cat", "/proc/self/status"),
			} {
				caps := procStatusCaps(t, status)
				if caps["CapInh"] != 0 || caps["CapAmb"] != 0 {
					t.Errorf("%s: CapInh %#x, CapAmb %#x; want 0", what, caps["CapInh"], caps["CapAmb"])
				}
				if caps["CapBnd"]&^tc.bnd != 0 {
					t.Errorf("%s: CapBnd %#x has more than %#x", what, caps["CapBnd"], tc.bnd)
				}
			}
		})
	}
	t.Run("privileged", func(t *testing.T) {
		privPod := e.runTestPod(t, "caps-priv", privilegedPod)
		defer func() {
			e.stopPod(t, privPod.id)
			e.removePod(t, privPod.id)
		}()
		priv := func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.Privileged = true }
		out := e.probeOK(t, privPod, containerConfig("caps-priv", busybox, priv, ctrCommand("cat", "/proc/self/status")))
		caps := procStatusCaps(t, out)
		if caps["CapBnd"]&(1<<capSysAdmin) == 0 {
			t.Errorf("privileged: CapBnd %#x lacks CAP_SYS_ADMIN: the probe does not see capabilities", caps["CapBnd"])
		}
		t.Logf("privileged: CapInh %#x CapAmb %#x CapBnd %#x", caps["CapInh"], caps["CapAmb"], caps["CapBnd"])
	})
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestSecurityMaskedPaths: a container sees none of the host's kernel
// memory, keyrings, timers or firmware, and cannot write the host-wide
// files of /proc (sysrq-trigger, /proc/sys, /proc/irq): the defaults
// containerd and CRI-O mask and make read-only are in the spec and in
// effect. A privileged container, which gets neither, is the control: the
// same probes see through.
func TestSecurityMaskedPaths(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")
	pod := e.runTestPod(t, "masked")

	masked := []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/acpi", "/proc/scsi", "/sys/firmware"}
	readonly := []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	// For each masked path: the bytes a read gets (a file) or the
	// entries listed (a directory); for each read-only one, whether a
	// write is refused. A path the kernel lacks prints "absent".
	var script strings.Builder
	for _, p := range masked {
		fmt.Fprintf(&script, "if [ -d %[1]s ]; then echo %[1]s $(ls -A %[1]s | wc -l); elif [ -e %[1]s ]; then echo %[1]s $(head -c 4096 %[1]s | wc -c); else echo %[1]s absent; fi\n", p)
	}
	// Writes that change nothing if they go through: sysrq "m" only logs
	// memory information, and the /proc/sys value is its current one.
	fmt.Fprintf(&script, "if (echo m > /proc/sysrq-trigger) 2>/dev/null; then echo sysrq-trigger written; else echo sysrq-trigger refused; fi\n")
	fmt.Fprintf(&script, "v=$(cat /proc/sys/kernel/shm_rmid_forced); if (echo $v > /proc/sys/kernel/shm_rmid_forced) 2>/dev/null; then echo proc-sys written; else echo proc-sys refused; fi\n")
	// mountinfo: the mount point is the 5th field, its options the 6th.
	fmt.Fprintf(&script, "for p in %s; do [ -e $p ] || { echo $p absent; continue; }; echo $p $(awk -v p=$p '$5 == p { split($6, o, \",\"); m = o[1] } END { print m }' /proc/self/mountinfo); done\n", strings.Join(readonly, " "))

	id := e.createContainer(t, pod, containerConfig("masked", busybox, ctrShell(script.String())))
	_, info := e.containerStatus(t, id)
	var spec struct {
		Linux struct {
			MaskedPaths   []string `json:"maskedPaths"`
			ReadonlyPaths []string `json:"readonlyPaths"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range masked {
		if !contains(spec.Linux.MaskedPaths, p) {
			t.Errorf("spec: %s is not masked (maskedPaths %v)", p, spec.Linux.MaskedPaths)
		}
	}
	for _, p := range readonly {
		if !contains(spec.Linux.ReadonlyPaths, p) {
			t.Errorf("spec: %s is not read-only (readonlyPaths %v)", p, spec.Linux.ReadonlyPaths)
		}
	}
	e.removeContainer(t, id)

	out := e.probeOK(t, pod, containerConfig("masked", busybox, ctrShell(script.String())))
	for _, p := range masked {
		line := p + " 0"
		if !containsLine(out, line) && !containsLine(out, p+" absent") {
			t.Errorf("%s is readable in the container, want nothing:\n%s", p, out)
		}
	}
	for _, want := range []string{"sysrq-trigger refused", "proc-sys refused"} {
		if !containsLine(out, want) {
			t.Errorf("want %q:\n%s", want, out)
		}
	}
	for _, p := range readonly {
		if !containsLine(out, p+" ro") && !containsLine(out, p+" absent") {
			t.Errorf("%s is not mounted read-only in the container:\n%s", p, out)
		}
	}

	// The control: the probes see through in a privileged container.
	privPod := e.runTestPod(t, "masked-priv", privilegedPod)
	priv := func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.Privileged = true }
	// (This kernel may lack /proc/kcore; /proc/timer_list and
	// /sys/firmware are there.)
	out = e.probeOK(t, privPod, containerConfig("masked-priv", busybox, priv, ctrShell(script.String())))
	if !containsLine(out, "/proc/timer_list 4096") || containsLine(out, "/sys/firmware 0") {
		t.Errorf("privileged container: want 4096 bytes of /proc/timer_list and entries in /sys/firmware (the probe must see unmasked paths):\n%s", out)
	}
	e.stopPod(t, privPod.id)
	e.removePod(t, privPod.id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// privilegedPod makes a pod privileged, as a privileged container needs.
func privilegedPod(c *runtimeapi.PodSandboxConfig) { c.Linux.SecurityContext.Privileged = true }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestSecuritySeccompDefault: a container with the RuntimeDefault seccomp
// profile cannot set up io_uring (a large kernel attack surface, out of
// the default profiles of Docker, containerd and CRI-O since 2023), join a
// keyring, or make a user namespace (unshare(CLONE_NEWUSER), the first
// step of many kernel exploits). The probes are a static program of the
// test's own (busybox cannot call io_uring_setup) and busybox's unshare.
// An Unconfined container is the control: there the same calls succeed.
func TestSecuritySeccompDefault(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	spec := defaultSpec(t, "test", "busybox")
	spec.Repository = "test/syscallprobe"
	spec.Files = append(spec.Files, testimage.File{Path: "/usr/bin/syscallprobe", HostPath: bin("podbay-syscallprobe"), Mode: 0o755})
	push(t, images.reg, spec)
	probeImage := images.ref("syscallprobe")
	e.pullImage(t, probeImage, nil)
	pod := e.runTestPod(t, "seccomp")

	script := "syscallprobe; if unshare -U true 2>/dev/null; then echo unshare ok; else echo unshare refused; fi"
	profile := func(p runtimeapi.SecurityProfile_ProfileType) ctrMod {
		return func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: p}
		}
	}
	out := e.probeOK(t, pod, containerConfig("seccomp-default", probeImage, profile(runtimeapi.SecurityProfile_RuntimeDefault), ctrShell(script)))
	for _, call := range []string{"io_uring_setup", "keyctl", "unshare"} {
		if !strings.Contains(out, call+" ") || strings.Contains(out, call+" ok") {
			t.Errorf("RuntimeDefault: %s was not refused:\n%s", call, out)
		}
	}
	// The control: the probes can tell.
	out = e.probeOK(t, pod, containerConfig("seccomp-unconfined", probeImage, profile(runtimeapi.SecurityProfile_Unconfined), ctrShell(script)))
	for _, call := range []string{"io_uring_setup", "unshare"} {
		if !strings.Contains(out, call+" ok") {
			t.Errorf("Unconfined: %s failed, so the probe cannot tell a refusal:\n%s", call, out)
		}
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestSecurityUIDOverflow: numbers a pod author writes in
// runAsUser/runAsGroup/supplementalGroups reach the CRI as int64; cut to
// the kernel's uint32, 4294967296 is root and -1 means "unchanged"
// (setresuid(2)), also root. Each is refused with InvalidArgument, as
// are run_as_group alone (the CRI says the runtime must error), more
// supplemental groups than the kernel takes, and user names with ":", a
// line break or a NUL (the image's /etc/passwd has no such user; podbay
// writes no passwd entry: a container run as a uid the image lacks sees
// the image's file unchanged). Nothing is created and no process runs.
// The largest valid uid is the control: it runs as that uid.
func TestSecurityUIDOverflow(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")
	pod := e.runTestPod(t, "uids")
	many := make([]int64, 100_000)
	for i := range many {
		many[i] = int64(i + 1)
	}
	username := func(n string) ctrMod {
		return func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.RunAsUsername = n }
	}
	t.Run("container", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			mods []ctrMod
		}{
			{"uid 2^32", []ctrMod{ctrRunAsUser(1 << 32)}},
			{"uid 2^32+1000", []ctrMod{ctrRunAsUser(1<<32 + 1000)}},
			{"uid -1", []ctrMod{ctrRunAsUser(-1)}},
			{"uid 2^31", []ctrMod{ctrRunAsUser(1 << 31)}},
			{"uid max int64", []ctrMod{ctrRunAsUser(1<<63 - 1)}},
			{"gid 2^32", []ctrMod{ctrRunAsUser(1000), ctrRunAsGroup(1 << 32)}},
			{"gid -1", []ctrMod{ctrRunAsUser(1000), ctrRunAsGroup(-1)}},
			{"gid without uid", []ctrMod{ctrRunAsGroup(1000)}},
			{"supplemental 2^32", []ctrMod{ctrRunAsUser(1000), ctrSupplementalGroups(1 << 32)}},
			{"supplemental -1", []ctrMod{ctrRunAsUser(1000), ctrSupplementalGroups(-1)}},
			{"100k supplemental groups", []ctrMod{ctrRunAsUser(1000), ctrSupplementalGroups(many...)}},
			{"user name with :", []ctrMod{username("root:root")}},
			{"user name with a newline", []ctrMod{username("nobody\nroot")}},
			{"user name with a NUL", []ctrMod{username("root\x00")}},
		} {
			cfg := containerConfig("uid-"+strings.ReplaceAll(tc.name, " ", "-"), busybox, append(tc.mods, ctrShell("id -u; sleep 1000"))...)
			id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
			if err == nil {
				e.startContainer(t, id)
				t.Errorf("%s: CreateContainer succeeded, want InvalidArgument; id -u: %q", tc.name, e.execOutput(t, id, "id", "-u"))
				e.removeContainer(t, id)
			} else if code(err) != codes.InvalidArgument {
				t.Errorf("%s: CreateContainer: %v, want InvalidArgument", tc.name, err)
			}
		}
		if got := e.listContainers(t, nil); len(got) != 0 {
			t.Errorf("containers left by refused requests: %v", containerIDs(got))
		}
	})
	t.Run("pod", func(t *testing.T) {
		podSC := func(f func(*runtimeapi.LinuxSandboxSecurityContext)) podMod {
			return func(c *runtimeapi.PodSandboxConfig) { f(c.Linux.SecurityContext) }
		}
		for _, tc := range []struct {
			name string
			mod  podMod
		}{
			{"uid 2^32", podSC(func(s *runtimeapi.LinuxSandboxSecurityContext) { s.RunAsUser = &runtimeapi.Int64Value{Value: 1 << 32} })},
			{"uid -1", podSC(func(s *runtimeapi.LinuxSandboxSecurityContext) { s.RunAsUser = &runtimeapi.Int64Value{Value: -1} })},
			{"gid 2^32", podSC(func(s *runtimeapi.LinuxSandboxSecurityContext) { s.RunAsGroup = &runtimeapi.Int64Value{Value: 1 << 32} })},
			{"supplemental -1", podSC(func(s *runtimeapi.LinuxSandboxSecurityContext) { s.SupplementalGroups = []int64{-1} })},
			{"100k supplemental groups", podSC(func(s *runtimeapi.LinuxSandboxSecurityContext) { s.SupplementalGroups = many })},
		} {
			id, err := e.tryRunPod(rpcCtx(t), e.podConfig("uids-"+randString(4), tc.mod), "")
			if err == nil {
				e.noteIDs(id)
				_, info := e.status(t, id)
				t.Errorf("%s: RunPodSandbox succeeded, want InvalidArgument; pause: %s", tc.name, grepLines(readHostFile(t, fmt.Sprintf("/proc/%d/status", info.Pid)), "id:"))
				e.stopAndRemove(t, id)
			} else if code(err) != codes.InvalidArgument {
				t.Errorf("%s: RunPodSandbox: %v, want InvalidArgument", tc.name, err)
			}
		}
		if got := e.listPods(t, nil); len(got) != 1 {
			t.Errorf("pods: %d, want only the test's", len(got))
		}
	})
	t.Run("control", func(t *testing.T) {
		const top = 1<<31 - 1
		out := e.probeOK(t, pod, containerConfig("uid-top", busybox, ctrRunAsUser(top), ctrRunAsGroup(top), ctrShell("id -u; id -g")))
		if want := fmt.Sprintf("%d\n%d\n", top, top); out != want {
			t.Errorf("uid and gid %d: id printed %q", top, out)
		}
		// No passwd entry is written for a uid the image lacks.
		image := e.probeOK(t, pod, containerConfig("passwd-root", busybox, ctrCommand("cat", "/etc/passwd")))
		asUID := e.probeOK(t, pod, containerConfig("passwd-4242", busybox, ctrRunAsUser(4242), ctrCommand("cat", "/etc/passwd")))
		if asUID != image {
			t.Errorf("/etc/passwd of a container run as uid 4242:\n%s\ndiffers from the image's:\n%s", asUID, image)
		}
	})
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
