package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/internal/nsinfo"
	"github.com/podbay/podbay/test/testimage"
)

// The gVisor tests run pods in gVisor's sandbox: containerd-shim-runsc-v1
// as a vm handler, configured as containerd users configure it (options
// with config_path to a runsc.toml, type io.containerd.runsc.v1.options).
// They need runsc and the shim: PODBAY_TEST_RUNSC names runsc (the shim is
// looked up next to it), else both are looked up in PATH; without them
// the tests skip. gVisor needs CAP_SYS_RESOURCE (its shim lowers its own
// oom_score_adj): the Debian 12 guest (../shared/testvm) has it.

// gvisorTimeout bounds a call that boots or tears down a sandbox: under
// emulation a sandbox takes tens of seconds to boot.
const gvisorTimeout = 5 * time.Minute

// gvisorBinaries returns the paths of runsc and containerd-shim-runsc-v1,
// or skips the test.
func gvisorBinaries(t *testing.T) (runsc, shim string) {
	t.Helper()
	requireRoot(t)
	if p := os.Getenv("PODBAY_TEST_RUNSC"); p != "" {
		runsc = p
		shim = filepath.Join(filepath.Dir(p), "containerd-shim-runsc-v1")
	} else {
		var err error
		if runsc, err = exec.LookPath("runsc"); err != nil {
			t.Skip("runsc not found (PODBAY_TEST_RUNSC or PATH)")
		}
		if shim, err = exec.LookPath("containerd-shim-runsc-v1"); err != nil {
			t.Skip("containerd-shim-runsc-v1 not found in PATH")
		}
	}
	for _, p := range []string{runsc, shim} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("gVisor binary: %v", err)
		}
	}
	return runsc, shim
}

// gvisorHandlers are the env's gVisor handlers: "gvisor" requires the
// network before start, "gvisor-after" allows a pod to ask for "after".
// @ENVDIR@ is replaced with the env's directory once it exists.
func gvisorHandlers(shim string) string {
	var b strings.Builder
	for _, h := range []struct {
		name  string
		extra string
	}{{"gvisor", ""}, {"gvisor-after", "allow_network_after = true\n"}} {
		fmt.Fprintf(&b, "[runtimes.%s]\ntype = \"vm\"\npath = %q\n", h.name, shim)
		fmt.Fprintf(&b, "config_path = \"@ENVDIR@/runsc.toml\"\noptions_type = \"io.containerd.runsc.v1.options\"\n")
		fmt.Fprintf(&b, "requires_network_before_start = true\ntimeout = %q\n%s\n", gvisorTimeout.String(), h.extra)
	}
	return b.String()
}

// newGVisorEnv is newContainerEnvWith for the gVisor handlers: the
// runsc.toml names runsc, its root (inside the env dir, so that the leak
// check sees runsc's processes) and its flags.
func newGVisorEnv(t *testing.T, opts envOptions, pull ...string) (*env, testImages) {
	t.Helper()
	runsc, shim := gvisorBinaries(t)
	// runsc's root is outside the env dir: runsc keeps one bind mount of
	// an empty network namespace there for all its gofers
	// (specutils.NullNetNSFilename), the runtime's state rather than a
	// pod's, unmounted here after the env's leak check. runsc's
	// processes are still the env's: in its cgroup tree, and their
	// command lines name the env's runsc-logs.
	runscRoot, err := os.MkdirTemp("", "pbrunsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for syscall.Unmount(filepath.Join(runscRoot, "podbay", "null-netns"), syscall.MNT_DETACH) == nil {
		}
		if err := os.RemoveAll(runscRoot); err != nil {
			t.Errorf("remove runsc root: %v", err)
		}
	})
	// The bridge plugin's ipMasq is off: runsc moves the pod's addresses
	// from the namespace's eth0 into its netstack when it boots, and the
	// bridge plugin (1.1.1, Debian 12) finds the addresses whose
	// masquerade rules it deletes on eth0 at DEL, so the rules outlive
	// the pod. See docs/operator-guide.md, "gVisor".
	opts.noIPMasq = true
	r := startRegistry(t, testimage.Options{})
	opts.registries = insecureRegistry(r.Addr())
	opts.tablesConfig = gvisorHandlers(shim) + opts.tablesConfig
	if opts.runtimeTimeout == "" {
		opts.runtimeTimeout = gvisorTimeout.String()
	}
	e := newEnv(t, opts)
	e.runscRootDir = runscRoot
	conf, err := os.ReadFile(e.configPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.configPath, []byte(strings.ReplaceAll(string(conf), "@ENVDIR@", e.dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(e.dir, "runsc-logs")
	toml := fmt.Sprintf(`binary_name = %q
root = %q

[runsc_config]
debug = "true"
debug-log = %q
`, runsc, e.runscRoot(), logDir+"/")
	if err := os.WriteFile(filepath.Join(e.dir, "runsc.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runsc debug logs, errors:\n%s", runscErrors(logDir))
		}
	})
	for _, name := range pushedImages {
		push(t, r, defaultSpec(t, "test", name))
	}
	e.start("")
	ti := testImages{reg: r, ids: map[string]string{}}
	for _, name := range pull {
		ti.ids[name] = e.pullImage(t, ti.ref(name), nil)
	}
	return e, ti
}

func (e *env) runscRoot() string { return e.runscRootDir }

// runscErrors is the warnings and errors of runsc's debug logs.
func runscErrors(dir string) string {
	var out []string
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "W") || strings.HasPrefix(l, "E") || strings.HasPrefix(l, "F") || strings.Contains(l, "rror") {
				out = append(out, filepath.Base(f)+": "+l)
			}
		}
	}
	if len(out) > 60 {
		out = out[len(out)-60:]
	}
	return strings.Join(out, "\n")
}

// runscContainers lists the containers runsc keeps state for in the env's
// runsc root.
func (e *env) runscContainers(t *testing.T, runsc string) []string {
	t.Helper()
	// The shim runs runsc with root <root>/<shim namespace>.
	root := filepath.Join(e.runscRoot(), "podbay")
	out, err := exec.Command(runsc, "--root", root, "list", "-quiet").CombinedOutput()
	if err != nil {
		if _, serr := os.Stat(root); os.IsNotExist(serr) {
			return nil
		}
		t.Fatalf("runsc list: %v: %s", err, out)
	}
	return strings.Fields(string(out))
}

func gvisorCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), gvisorTimeout)
	t.Cleanup(cancel)
	return ctx
}

// runGVisorPod runs a pod on handler with the kubelet's log directory.
func (e *env) runGVisorPod(t *testing.T, name, handler string, mods ...podMod) testPod {
	t.Helper()
	cfg := e.podConfig(name, mods...)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	resp, err := e.rt.RunPodSandbox(gvisorCtx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox %s on %s: %v", name, handler, err)
	}
	e.mu.Lock()
	e.seenIDs[resp.PodSandboxId] = true
	e.mu.Unlock()
	return testPod{id: resp.PodSandboxId, cfg: cfg}
}

func (e *env) runGVisorContainer(t *testing.T, pod testPod, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	resp, err := e.rt.CreateContainer(gvisorCtx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.Metadata.Name, err)
	}
	if _, err := e.rt.StartContainer(gvisorCtx(t), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		t.Fatalf("StartContainer %s: %v", cfg.Metadata.Name, err)
	}
	return resp.ContainerId
}

func (e *env) gvisorExec(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	resp, err := e.rt.ExecSync(gvisorCtx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 120})
	if err != nil {
		t.Fatalf("ExecSync %q: %v", cmd, err)
	}
	if resp.ExitCode != 0 {
		t.Fatalf("ExecSync %q: exit %d: %s%s", cmd, resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return string(resp.Stdout)
}

func (e *env) gvisorStopAndRemove(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := e.rt.StopPodSandbox(gvisorCtx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("StopPodSandbox %s: %v", short(id), err)
		}
		if _, err := e.rt.RemovePodSandbox(gvisorCtx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("RemovePodSandbox %s: %v", short(id), err)
		}
	}
}

// requireGVisorSandbox proves that the pod runs in gVisor: the shim v2
// process serves it, a runsc sandbox (runsc boot) of the env's runsc root
// runs for it, and the container's kernel is gVisor's (its dmesg).
func (e *env) requireGVisorSandbox(t *testing.T, podID, ctrID string) {
	t.Helper()
	if shimProcess(podID) == 0 {
		t.Errorf("no containerd-shim process serves pod %s", short(podID))
	}
	boot := false
	for _, p := range readProcs() {
		if strings.Contains(p.cmdline, "--root="+e.runscRoot()) && strings.Contains(p.cmdline, " boot ") && strings.Contains(p.cmdline, podID) {
			boot = true
		}
	}
	if !boot {
		t.Errorf("no runsc sandbox (runsc boot, root %s) runs pod %s", e.runscRoot(), short(podID))
	}
	if out := e.gvisorExec(t, ctrID, "dmesg"); !strings.Contains(out, "gVisor") {
		t.Errorf("dmesg in the container is not gVisor's:\n%s", out)
	}
}

// httpGet fetches url from the host's network namespace.
func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// httpdConfig serves body on port 8080 with busybox httpd.
func httpdConfig(ref, body string) *runtimeapi.ContainerConfig {
	return containerConfig("httpd", ref, ctrShell(fmt.Sprintf(
		"mkdir -p /www && echo %s > /www/index.html && echo serving && exec httpd -f -p 8080 -h /www", body)))
}

// TestGVisorNetworkBefore runs a pod in gVisor with the network set up
// before the sandbox starts: gVisor's netstack copies the pod's interface
// and IP when it boots, so they are inside the sandbox and the pod's
// server answers the host at the pod IP. Exec, logs, attach, stats, exit
// codes, stop and remove work; nothing is left.
func TestGVisorNetworkBefore(t *testing.T) {
	runsc, _ := gvisorBinaries(t)
	e, images := newGVisorEnv(t, envOptions{}, "busybox")
	ref := images.ref("busybox")
	pod := e.runGVisorPod(t, "gv-before", "gvisor")
	st, info := e.status(t, pod.id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || info.NetworkOrder != "before" || st.RuntimeHandler != "gvisor" {
		t.Fatalf("pod state %v order %q handler %q, want READY before gvisor", st.State, info.NetworkOrder, st.RuntimeHandler)
	}
	ip := e.requireIPInSubnet(t, podIP(st)).String()

	httpd := e.runGVisorContainer(t, pod, httpdConfig(ref, "hello-from-gvisor"))
	cst, _ := e.containerStatus(t, httpd)
	if cst.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("httpd state %v", cst.State)
	}
	e.requireGVisorSandbox(t, pod.id, httpd)

	// The pod's interface and IP are in the sandbox's own network stack.
	if out := e.gvisorExec(t, httpd, "ip", "addr"); !strings.Contains(out, "eth0") || !strings.Contains(out, ip+"/") {
		t.Errorf("ip addr in the sandbox has no eth0 with %s:\n%s", ip, out)
	}
	if out := e.gvisorExec(t, httpd, "cat", "/proc/net/dev"); !strings.Contains(out, "eth0") {
		t.Errorf("/proc/net/dev in the sandbox has no eth0:\n%s", out)
	}
	// Reachable from the host at the pod IP.
	var body string
	if err := eventually(60*time.Second, func() error {
		var err error
		body, err = httpGet("http://" + ip + ":8080/")
		return err
	}); err != nil || !strings.Contains(body, "hello-from-gvisor") {
		t.Errorf("GET http://%s:8080/ from the host: %q, %v", ip, body, err)
	}

	// Logs: the container's stdout is in its CRI log.
	waitLogLine(t, cst.LogPath, "stdout", "serving", 60*time.Second)

	// ContainerStats reports the sandboxed container's CPU and memory.
	if err := eventually(60*time.Second, func() error {
		resp, err := e.rt.ContainerStats(gvisorCtx(t), &runtimeapi.ContainerStatsRequest{ContainerId: httpd})
		if err != nil {
			return err
		}
		s := resp.GetStats()
		if s.GetMemory().GetWorkingSetBytes().GetValue() == 0 || s.GetCpu() == nil {
			return fmt.Errorf("stats %v", s)
		}
		return nil
	}); err != nil {
		t.Errorf("ContainerStats: %v", err)
	}

	t.Run("attach", func(t *testing.T) {
		stdinOnce := func(c *runtimeapi.ContainerConfig) { c.Stdin, c.StdinOnce = true, true }
		id := e.runGVisorContainer(t, pod, containerConfig("attach", ref, ctrCommand("cat"), stdinOnce))
		var out syncBuffer
		stdinR, stdinW := io.Pipe()
		done := make(chan error, 1)
		url := e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Stderr: true})
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), gvisorTimeout)
			defer cancel()
			done <- streamURL(ctx, url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out, Stderr: io.Discard})
		}()
		out.wait(t, "ping\n", func() { _, _ = io.WriteString(stdinW, "ping\n") })
		stdinW.Close()
		if err := waitErr(t, done); err != nil {
			t.Errorf("attach session: %v", err)
		}
		st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, gvisorTimeout)
		if st.ExitCode != 0 {
			t.Errorf("exit code %d after stdin closed, want 0", st.ExitCode)
		}
		e.removeContainer(t, id)
	})

	// A container's exit code comes from the sandbox. (Not an OOM kill:
	// gVisor does not enforce a container's own memory limit inside the
	// sandbox — a 16 MiB-limited memory hog ran for 5 minutes — and
	// reports OOM for the sandbox's cgroup as a whole.)
	t.Run("exit-code", func(t *testing.T) {
		seven := e.runGVisorContainer(t, pod, containerConfig("seven", ref, ctrShell("exit 7")))
		st := e.waitContainerState(t, seven, runtimeapi.ContainerState_CONTAINER_EXITED, gvisorTimeout)
		if st.ExitCode != 7 || st.Reason != "Error" {
			t.Errorf("seven: exit %d reason %q, want 7 Error", st.ExitCode, st.Reason)
		}
		e.removeContainer(t, seven)
	})

	// Stop and remove the container, then the pod.
	if _, err := e.rt.StopContainer(gvisorCtx(t), &runtimeapi.StopContainerRequest{ContainerId: httpd, Timeout: 10}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if st := e.waitContainerState(t, httpd, runtimeapi.ContainerState_CONTAINER_EXITED, gvisorTimeout); st.ExitCode == 0 {
		t.Logf("httpd exit code %d", st.ExitCode)
	}
	e.removeContainer(t, httpd)
	e.gvisorStopAndRemove(t, pod.id)
	if ids := e.runscContainers(t, runsc); len(ids) != 0 {
		t.Errorf("runsc still keeps containers: %v", ids)
	}
	e.eventuallyNoLeaks(t, 60*time.Second)
}

// TestGVisorNetworkAfter: on a handler that requires the network before
// start, a pod asking for "after" is refused; with allow_network_after it
// runs, a warning is logged, and the sandbox, booted before the interface
// existed, has neither the pod's interface nor its IP, and the pod is not
// reachable, although the pod's namespace has both.
func TestGVisorNetworkAfter(t *testing.T) {
	runsc, _ := gvisorBinaries(t)
	e, images := newGVisorEnv(t, envOptions{}, "busybox")
	after := withAnnotation(podbayOrderAnnotation, "after")

	_, err := e.rt.RunPodSandbox(gvisorCtx(t), &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("gv-refused", after), RuntimeHandler: "gvisor"})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "requires_network_before_start") {
		t.Fatalf("RunPodSandbox asking for after on gvisor: %v, want FailedPrecondition naming requires_network_before_start", err)
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Fatalf("a refused pod is listed: %v", podIDs(pods))
	}

	pod := e.runGVisorPod(t, "gv-after", "gvisor-after", after)
	st, info := e.status(t, pod.id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || info.NetworkOrder != "after" {
		t.Fatalf("pod state %v order %q, want READY after", st.State, info.NetworkOrder)
	}
	ip := e.requireIPInSubnet(t, podIP(st)).String()
	if !strings.Contains(fileTail(e.logPath, 400), "pod network set up after its sandbox starts") {
		t.Errorf("no warning in podbayd's log for a pod with network after on gvisor-after")
	}
	// The pod's namespace has the interface: CNI ran, after the boot.
	if now, err := nsinfo.Interfaces(e.netnsPath(pod.id)); err != nil {
		t.Fatal(err)
	} else if eth0, ok := findIface(now, "eth0"); !ok || !hasAddr(eth0, ip) {
		t.Errorf("the pod's network namespace has no eth0 with %s: %s", ip, ifaceNames(now))
	}

	httpd := e.runGVisorContainer(t, pod, httpdConfig(images.ref("busybox"), "hello-from-gvisor"))
	e.requireGVisorSandbox(t, pod.id, httpd)
	if out := e.gvisorExec(t, httpd, "ip", "addr"); strings.Contains(out, ip+"/") || strings.Contains(out, "eth0") {
		t.Errorf("network after: the sandbox has the pod's interface or IP %s:\n%s", ip, out)
	} else {
		t.Logf("network after: interfaces inside the sandbox:\n%s", out)
	}
	if out := e.gvisorExec(t, httpd, "cat", "/proc/net/dev"); strings.Contains(out, "eth0") {
		t.Errorf("network after: /proc/net/dev in the sandbox has eth0:\n%s", out)
	}
	cst, _ := e.containerStatus(t, httpd)
	waitLogLine(t, cst.LogPath, "stdout", "serving", 60*time.Second)
	// The server listens inside the sandbox, but no packet reaches it.
	for i := 0; i < 3; i++ {
		if body, err := httpGet("http://" + ip + ":8080/"); err == nil {
			t.Fatalf("network after: GET http://%s:8080/ answered %q", ip, body)
		}
		time.Sleep(time.Second)
	}
	e.gvisorStopAndRemove(t, pod.id)
	if ids := e.runscContainers(t, runsc); len(ids) != 0 {
		t.Errorf("runsc still keeps containers: %v", ids)
	}
	e.eventuallyNoLeaks(t, 60*time.Second)
}

// TestGVisorRestartRecovery: podbayd killed with SIGKILL while a gVisor
// pod runs finds it again at start: the pod is ready, its container
// running and answering exec and the host; then it is removed cleanly.
func TestGVisorRestartRecovery(t *testing.T) {
	runsc, _ := gvisorBinaries(t)
	e, images := newGVisorEnv(t, envOptions{}, "busybox")
	pod := e.runGVisorPod(t, "gv-restart", "gvisor")
	st, _ := e.status(t, pod.id)
	ip := podIP(st)
	httpd := e.runGVisorContainer(t, pod, httpdConfig(images.ref("busybox"), "still-here"))

	e.kill9()
	e.restart("")
	e.requireGVisorSandbox(t, pod.id, httpd)
	st, _ = e.status(t, pod.id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || podIP(st) != ip {
		t.Errorf("after restart: pod %v ip %q, want READY %s", st.State, podIP(st), ip)
	}
	if cst, _ := e.containerStatus(t, httpd); cst.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after restart: container %v, want RUNNING", cst.State)
	}
	var body string
	if err := eventually(60*time.Second, func() error {
		var err error
		body, err = httpGet("http://" + ip + ":8080/")
		return err
	}); err != nil || !strings.Contains(body, "still-here") {
		t.Errorf("after restart: GET from the host: %q, %v", body, err)
	}
	e.assertNoLeaksExcept(t, pod.id, httpd)
	e.gvisorStopAndRemove(t, pod.id)
	if ids := e.runscContainers(t, runsc); len(ids) != 0 {
		t.Errorf("runsc still keeps containers: %v", ids)
	}
	e.eventuallyNoLeaks(t, 60*time.Second)
}

// TestGVisorStartLatency measures RunPodSandbox and CreateContainer +
// StartContainer for runc (conmon, the host's runc, no wrapper) and
// gVisor, alternating, and logs the medians. PODBAY_TEST_GVISOR_SAMPLES
// sets the samples per runtime (default 3).
func TestGVisorStartLatency(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc not in PATH")
	}
	e, images := newGVisorEnv(t, envOptions{extraRuntimes: map[string]handlerOptions{"plainrunc": {typ: "oci", runtime: runc}}}, "busybox")
	n := 3
	if v := os.Getenv("PODBAY_TEST_GVISOR_SAMPLES"); v != "" {
		fmt.Sscan(v, &n)
	}
	type sample struct{ run, start time.Duration }
	got := map[string][]sample{}
	for i := 0; i < n; i++ {
		for _, h := range []string{"plainrunc", "gvisor"} {
			t0 := time.Now()
			pod := e.runGVisorPod(t, fmt.Sprintf("lat-%s-%d", h, i), h)
			t1 := time.Now()
			id := e.runGVisorContainer(t, pod, containerConfig("sleep", images.ref("busybox"), ctrCommand("sleep", "3600")))
			t2 := time.Now()
			got[h] = append(got[h], sample{t1.Sub(t0), t2.Sub(t1)})
			_ = id
			e.gvisorStopAndRemove(t, pod.id)
		}
	}
	for _, h := range []string{"plainrunc", "gvisor"} {
		var runs, starts []time.Duration
		for _, s := range got[h] {
			runs, starts = append(runs, s.run), append(starts, s.start)
		}
		slices.Sort(runs)
		slices.Sort(starts)
		t.Logf("%s: RunPodSandbox p50 %v %v; CreateContainer+StartContainer p50 %v %v", h,
			runs[len(runs)/2].Round(time.Millisecond), runs, starts[len(starts)/2].Round(time.Millisecond), starts)
	}
	e.eventuallyNoLeaks(t, 60*time.Second)
}
