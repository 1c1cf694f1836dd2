package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerSpec checks from inside containers that the CRI
// configuration and the image configuration are applied: user and groups,
// capabilities, read-only root, environment, working directory, entrypoint
// and command, bind mounts, DNS, hostname, PID namespace, network and
// memory limit.
func TestContainerSpec(t *testing.T) {
	e, images := newContainerEnv(t, pushedImages...)
	pod := e.runTestPod(t, "spec",
		withHostname("spec-host"),
		withDNS([]string{"10.0.0.10", "10.0.0.11"}, []string{"svc.example", "example"}, []string{"ndots:5"}),
		withNamespaces(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD))
	busybox, config := images.ref("busybox"), images.ref("config")

	t.Run("user", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			cfg   *runtimeapi.ContainerConfig
			want  string // id -u, id -g, id -G
			about string
		}{
			{"image-uid", containerConfig("image-uid", images.ref("user-uid")), "1000\n1000\n1000 1100\n", "image USER 1000:1000, and test's group testextra from /etc/group"},
			{"image-name", containerConfig("image-name", images.ref("user-name")), "33\n33\n33\n", "image USER www-data"},
			{"run-as-user", containerConfig("run-as-user", images.ref("user-uid"), ctrRunAsUser(1001)), "1001\n1001\n1001 1100\n", "RunAsUser 1001 (test2) over the image's user"},
			{"run-as-group", containerConfig("run-as-group", busybox, ctrRunAsUser(1000), ctrRunAsGroup(2000)), "1000\n2000\n1100 2000\n", "RunAsGroup 2000"},
			{"supplemental", containerConfig("supplemental", busybox, ctrRunAsUser(65534), ctrSupplementalGroups(3000, 3001)), "65534\n65534\n3000 3001 65534\n", "SupplementalGroups 3000, 3001"},
			{"root", containerConfig("root", busybox), "0\n0\n0 10\n", "no user: root, and group wheel from /etc/group"},
		} {
			tc.cfg.Command = []string{"sh", "-c", "id -u; id -g; id -G"}
			if got := sortGroups(e.probeOK(t, pod, tc.cfg)); got != tc.want {
				t.Errorf("%s (%s): id -u, -g, -G (sorted) printed %q, want %q", tc.name, tc.about, got, tc.want)
			}
		}
	})

	t.Run("exec-user", func(t *testing.T) {
		id, _ := e.runContainer(t, pod, containerConfig("exec-user", images.ref("user-uid"), ctrCommand("sleep", "1000")))
		defer e.removeContainer(t, id)
		if got := e.execOutput(t, id, "id", "-u"); got != "1000\n" {
			t.Errorf("ExecSync id -u in a container of user 1000: %q", got)
		}
	})

	t.Run("capabilities", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			cfg  *runtimeapi.ContainerConfig
			want uint64
		}{
			{"default", containerConfig("caps-default", busybox), defaultCapMask},
			{"add-net-admin", containerConfig("caps-add", busybox, ctrCapabilities([]string{"NET_ADMIN"}, nil)), defaultCapMask | 1<<capNetAdmin},
			{"drop-all", containerConfig("caps-drop", busybox, ctrCapabilities(nil, []string{"ALL"})), 0},
			{"drop-net-raw", containerConfig("caps-drop-raw", busybox, ctrCapabilities(nil, []string{"NET_RAW"})), defaultCapMask &^ (1 << capNetRaw)},
		} {
			tc.cfg.Command = []string{"grep", "CapEff", "/proc/self/status"}
			out := e.probeOK(t, pod, tc.cfg)
			got, err := capEff(out)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if got != tc.want {
				t.Errorf("%s: CapEff %#x, want %#x (NET_ADMIN %v)", tc.name, got, tc.want, got&(1<<capNetAdmin) != 0)
			}
		}
	})

	t.Run("readonly-rootfs", func(t *testing.T) {
		script := "if touch /x 2>/dev/null; then echo writable; else echo read-only; fi; touch /tmp/y 2>/dev/null && echo tmp-writable || echo tmp-read-only"
		if got := e.probeOK(t, pod, containerConfig("rootfs-ro", busybox, ctrReadonlyRootfs(), ctrShell(script))); got != "read-only\ntmp-read-only\n" {
			t.Errorf("read-only rootfs: %q, want / and /tmp read-only", got)
		}
		// Control: the same check sees a writable root.
		if got := e.probeOK(t, pod, containerConfig("rootfs-rw", busybox, ctrShell(script))); got != "writable\ntmp-writable\n" {
			t.Errorf("default rootfs: %q, want writable", got)
		}
	})

	t.Run("env", func(t *testing.T) {
		script := `echo "P=$PATH"; echo "G=$GREETING"; echo "F=$FOO"; echo "E=${EMPTY+set}"; echo "H=$HOSTNAME"; echo "S=$SPACES"`
		cfg := containerConfig("env", config, ctrShell(script), ctrEnv("FOO", "bar"), ctrEnv("GREETING", "from the CRI"), ctrEnv("SPACES", " a  b "))
		want := "P=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nG=from the CRI\nF=bar\nE=set\nH=spec-host\nS= a  b \n"
		if got := e.probeOK(t, pod, cfg); got != want {
			t.Errorf("environment:\n%s\nwant (image PATH and EMPTY, CRI FOO, CRI GREETING over the image's, pod HOSTNAME):\n%s", got, want)
		}
	})

	t.Run("working-dir", func(t *testing.T) {
		if got := e.probeOK(t, pod, containerConfig("wd-image", config, ctrShell("pwd; cat hello.txt"))); got != "/srv/app\nhello from the image\n" {
			t.Errorf("image WorkingDir: %q, want /srv/app and its hello.txt", got)
		}
		if got := e.probeOK(t, pod, containerConfig("wd-cri", config, ctrShell("pwd"), ctrWorkingDir("/tmp"))); got != "/tmp\n" {
			t.Errorf("CRI WorkingDir /tmp: %q", got)
		}
	})

	t.Run("entrypoint", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			mods []ctrMod
			want string
		}{
			{"image", nil, "entrypoint cmd\n"},
			{"args", []ctrMod{ctrArgs("a", "b")}, "entrypoint a b\n"},
			{"command", []ctrMod{ctrCommand("/bin/echo", "override")}, "override\n"},
			{"command-args", []ctrMod{ctrCommand("/bin/echo", "override"), ctrArgs("x")}, "override x\n"},
		} {
			if got := e.probeOK(t, pod, containerConfig("entry-"+tc.name, config, tc.mods...)); got != tc.want {
				t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
			}
		}
	})

	t.Run("bind-mounts", func(t *testing.T) {
		dir := t.TempDir()
		roFile, rwFile := filepath.Join(dir, "ro.txt"), filepath.Join(dir, "rw.txt")
		for _, f := range []string{roFile, rwFile} {
			if err := os.WriteFile(f, []byte("host content\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		script := `cat /mnt/ro.txt; if (echo x >> /mnt/ro.txt) 2>/dev/null; then echo ro-written; else echo ro-refused; fi; echo from the container > /srv/rw.txt && echo rw-written`
		cfg := containerConfig("mounts", busybox, ctrShell(script), ctrMount(roFile, "/mnt/ro.txt", true), ctrMount(rwFile, "/srv/rw.txt", false))
		id := e.createContainer(t, pod, cfg)
		st, _ := e.containerStatus(t, id)
		mounts := map[string]*runtimeapi.Mount{}
		for _, m := range st.Mounts {
			mounts[m.ContainerPath] = m
		}
		if m := mounts["/mnt/ro.txt"]; m == nil || m.HostPath != roFile || !m.Readonly {
			t.Errorf("status mount /mnt/ro.txt: %v, want read-only from %s", m, roFile)
		}
		if m := mounts["/srv/rw.txt"]; m == nil || m.HostPath != rwFile || m.Readonly {
			t.Errorf("status mount /srv/rw.txt: %v, want read-write from %s", m, rwFile)
		}
		e.startContainer(t, id)
		st = e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
		lines, err := readCRILog(st.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if got := logText(lines); got != "host content\nro-refused\nrw-written\n" {
			t.Errorf("bind mounts from inside: %q", got)
		}
		if got := readHostFile(t, roFile); got != "host content\n" {
			t.Errorf("read-only host file now %q", got)
		}
		if got := readHostFile(t, rwFile); got != "from the container\n" {
			t.Errorf("read-write host file now %q, want the container's write", got)
		}
		e.removeContainer(t, id)
	})

	t.Run("dns-and-hostname", func(t *testing.T) {
		out := e.probeOK(t, pod, containerConfig("dns", busybox, ctrShell("cat /etc/resolv.conf; echo ---; hostname")))
		resolv, host, _ := strings.Cut(out, "---\n")
		for _, want := range []string{"nameserver 10.0.0.10", "nameserver 10.0.0.11", "search svc.example example", "options ndots:5"} {
			if !containsLine(resolv, want) {
				t.Errorf("/etc/resolv.conf lacks %q:\n%s", want, resolv)
			}
		}
		if host != "spec-host\n" {
			t.Errorf("hostname %q, want the pod's spec-host", host)
		}
	})

	t.Run("pid-namespace", func(t *testing.T) {
		script := "tr '\\0' ' ' </proc/1/cmdline; echo; echo $$; ps -o pid,args | grep -c '[p]ause' || true"
		shared := e.probeOK(t, pod, containerConfig("pid-pod", busybox, ctrPidMode(runtimeapi.NamespaceMode_POD), ctrShell(script)))
		lines := strings.Split(shared, "\n")
		if len(lines) < 3 || strings.TrimSpace(lines[0]) != "/pause" || lines[1] == "1" || lines[2] != "1" {
			t.Errorf("PID namespace POD: PID 1 / own PID / pause processes in ps = %q; want /pause, not 1, 1", shared)
		}
		own := e.probeOK(t, pod, containerConfig("pid-container", busybox, ctrPidMode(runtimeapi.NamespaceMode_CONTAINER), ctrShell(script)))
		lines = strings.Split(own, "\n")
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "sh -c") || lines[1] != "1" || lines[2] != "0" {
			t.Errorf("PID namespace CONTAINER: PID 1 / own PID / pause processes in ps = %q; want sh -c ..., 1, 0", own)
		}
	})

	t.Run("network", func(t *testing.T) {
		podSt, podInfo := e.status(t, pod.id)
		ip, gw := podIP(podSt), podInfo.NetworkSettings.Gateway
		server, _ := e.runContainer(t, pod, containerConfig("server", busybox, ctrCommand("nc", "-ll", "-p", "8080", "-e", "/bin/echo", "pong")))
		defer e.removeContainer(t, server)
		client, _ := e.runContainer(t, pod, containerConfig("client", busybox, ctrCommand("sleep", "1000")))
		defer e.removeContainer(t, client)

		if addr := e.execOutput(t, client, "ip", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(addr, " "+ip+"/") {
			t.Errorf("eth0 in the container does not have the pod IP %s:\n%s", ip, addr)
		}
		// Polled: the first echo may race ARP.
		if err := eventually(10*time.Second, func() error {
			if r := e.execSync(t, client, 10, "ping", "-c1", "-W2", gw); r.ExitCode != 0 {
				return fmt.Errorf("exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
			}
			return nil
		}); err != nil {
			t.Errorf("ping the gateway %s from the container: %v", gw, err)
		}
		var got string
		if err := eventually(10*time.Second, func() error {
			r := e.execSync(t, client, 5, "nc", "127.0.0.1", "8080")
			if got = string(r.Stdout); got != "pong\n" {
				return fmt.Errorf("exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
			}
			return nil
		}); err != nil {
			t.Errorf("TCP from one container to another on 127.0.0.1:8080: %v", err)
		}
		if err := eventually(10*time.Second, func() error {
			reply, err := exchange(net.JoinHostPort(ip, "8080"), "")
			if err != nil {
				return err
			}
			if reply != "pong\n" {
				return fmt.Errorf("reply %q", reply)
			}
			return nil
		}); err != nil {
			t.Errorf("TCP from the host to %s:8080: %v", ip, err)
		}
	})

	t.Run("memory-limit", func(t *testing.T) {
		cfg := containerConfig("memlimit", busybox, ctrMemoryLimit(64<<20), ctrCommand("cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"))
		if got := e.probeOK(t, pod, cfg); got != strconv.Itoa(64<<20)+"\n" {
			t.Errorf("memory.limit_in_bytes in the container: %q, want %d", got, 64<<20)
		}
	})

	if t.Failed() {
		return // cleanup removes the pod and reports leaks
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers left by the subtests: %v", containerIDs(got))
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
