package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodOptions checks that the pod's DNS, hostname, sysctls, namespace
// modes and cgroup parent reach the pause process.
func TestPodOptions(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	hostPortStart := strings.TrimSpace(readHostFile(t, "/proc/sys/net/ipv4/ip_unprivileged_port_start"))
	podPortStart := "1000"
	if hostPortStart == podPortStart {
		podPortStart = "1001"
	}
	parent := e.cgroupChild("custom")
	a := e.runPod(t, e.podConfig("opts-a",
		withDNS([]string{"10.0.0.10", "10.0.0.11"}, []string{"pbt.svc.cluster.local", "cluster.local"}, []string{"ndots:5", "timeout:2"}),
		withHostname("pbt-host-a"),
		withSysctls(map[string]string{
			"net.ipv4.ip_unprivileged_port_start": podPortStart,
			"kernel.shm_rmid_forced":              "1",
		}),
		withNamespaces(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD),
		withCgroupParent(parent),
	), "")
	// B shares the host's PID namespace: it needs no pause process, and
	// podbayd pins only its UTS namespace (IPC is the host's too).
	b := e.runPod(t, e.podConfig("opts-b", withNamespaces(runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_NODE)), "")

	_, infoA := e.status(t, a)
	_, infoB := e.status(t, b)
	pidA := infoA.Pid
	if !pidAlive(pidA) {
		t.Fatalf("pause pid %d from verbose info is not running", pidA)
	}
	// utsB is pod B's UTS namespace: its pin, or under a vm handler (whose
	// pods keep their sandbox process) the shim sandbox's.
	utsB := infoB.Pins.UTS
	if suiteRuntimeType == "vm" {
		if infoB.SandboxKind != "shim" || !pidAlive(infoB.Pid) {
			t.Fatalf("pod B (pid NODE, ipc NODE) on a vm handler: kind %q, pid %d: want its shim sandbox", infoB.SandboxKind, infoB.Pid)
		}
		utsB = fmt.Sprintf("/proc/%d/ns/uts", infoB.Pid)
	} else if infoB.SandboxKind != "pinned" || infoB.Pid != 0 || infoB.Pins.IPC != "" || !isPinned(infoB.Pins.UTS) {
		t.Fatalf("pod B (pid NODE, ipc NODE): kind %q, pid %d, pins %+v: want pinned, only UTS", infoB.SandboxKind, infoB.Pid, infoB.Pins)
	}

	t.Run("dns", func(t *testing.T) {
		resolv := readProcFile(t, pidA, "/etc/resolv.conf")
		for _, want := range []string{"nameserver 10.0.0.10", "nameserver 10.0.0.11", "search pbt.svc.cluster.local cluster.local", "options ndots:5 timeout:2"} {
			if !containsLine(resolv, want) {
				t.Errorf("resolv.conf has no line %q:\n%s", want, resolv)
			}
		}
	})
	t.Run("hostname", func(t *testing.T) {
		if got := strings.TrimSpace(readProcFile(t, pidA, "/etc/hostname")); got != "pbt-host-a" {
			t.Errorf("/etc/hostname %q, want pbt-host-a", got)
		}
		out, err := runCmd("nsenter", "--target", fmt.Sprint(pidA), "--uts", "cat", "/proc/sys/kernel/hostname")
		if err != nil {
			t.Fatal(err)
		}
		if out != "pbt-host-a" {
			t.Errorf("UTS hostname %q, want pbt-host-a", out)
		}
	})
	t.Run("sysctls", func(t *testing.T) {
		// Network sysctls are read in the reader's network namespace.
		out, err := runCmd("nsenter", "--net="+e.netnsPath(a), "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start")
		if err != nil {
			t.Fatal(err)
		}
		if out != podPortStart {
			t.Errorf("net.ipv4.ip_unprivileged_port_start in the pod = %s, want %s", out, podPortStart)
		}
		out, err = runCmd("nsenter", "--target", fmt.Sprint(pidA), "--ipc", "cat", "/proc/sys/kernel/shm_rmid_forced")
		if err != nil {
			t.Fatal(err)
		}
		if out != "1" {
			t.Errorf("kernel.shm_rmid_forced in the pod = %s, want 1", out)
		}
		if got := strings.TrimSpace(readHostFile(t, "/proc/sys/net/ipv4/ip_unprivileged_port_start")); got != hostPortStart {
			t.Errorf("the pod's sysctl changed the host's value: %s, was %s", got, hostPortStart)
		}
	})
	t.Run("namespaces", func(t *testing.T) {
		self := func(kind string) uint64 { return nsInode(t, "/proc/self/ns/"+kind) }
		of := func(pid int, kind string) uint64 { return nsInode(t, fmt.Sprintf("/proc/%d/ns/%s", pid, kind)) }
		if of(pidA, "pid") == self("pid") {
			t.Error("pod A (PID namespace POD) shares the host PID namespace")
		}
		if of(pidA, "ipc") == self("ipc") {
			t.Error("pod A (IPC namespace POD) shares the host IPC namespace")
		}
		if of(pidA, "uts") == self("uts") {
			t.Error("pod A shares the host UTS namespace")
		}
		if nsInode(t, utsB) == self("uts") {
			t.Error("pod B's UTS namespace is the host's")
		}
		if of(pidA, "net") != nsInode(t, e.netnsPath(a)) {
			t.Error("the pause process is not in its sandbox key's network namespace")
		}
	})
	t.Run("cgroup", func(t *testing.T) {
		if cg := readHostFile(t, fmt.Sprintf("/proc/%d/cgroup", pidA)); !cgroupUnder(cg, e.parentDir(parent)) {
			t.Errorf("pod A is not under its cgroup parent %s:\n%s", parent, cg)
		}
	})

	e.stopAndRemove(t, a, b)
	e.assertNoLeaks(t)
}

func readHostFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func containsLine(text, want string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(line), " ") == want {
			return true
		}
	}
	return false
}

// cgroupUnder reports whether a /proc/PID/cgroup listing places the process
// below parent in the memory, pids or cpu hierarchy.
func cgroupUnder(listing, parent string) bool {
	for _, line := range strings.Split(listing, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		// The unified hierarchy ("0::") of a pure cgroup v2 host, or a v1
		// controller's.
		if (parts[0] == "0" && parts[1] == "" && fileExists("/sys/fs/cgroup/cgroup.controllers")) ||
			strings.Contains(","+parts[1]+",", ",memory,") || strings.Contains(","+parts[1]+",", ",pids,") || strings.Contains(","+parts[1]+",", ",cpu,") {
			if strings.HasPrefix(parts[2], parent+"/") {
				return true
			}
		}
	}
	return false
}
