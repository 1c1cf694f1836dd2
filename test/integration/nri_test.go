package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// The NRI tests run the NRI project's sample plugins (test/tools/nri-*,
// built by TestMain): nri-logger, which logs every event it gets (and the
// pods and containers a Synchronize hands it) and adds an environment
// variable to each container; and nri-device-injector, which injects the
// devices and mounts a pod's annotations ask for and refuses a container
// whose annotation it cannot parse.

const nriPluginTimeout = 20 * time.Second

// nriSocket is the env's NRI socket (its [nri] socket_path).
func (e *env) nriSocket() string { return filepath.Join(e.dir, "nri.sock") }

// startNRIPlugin runs a sample plugin from binDir as an external plugin on
// the env's socket; it is killed (by its PID) when the test ends, before
// the env's leak check.
func startNRIPlugin(t *testing.T, e *env, name string, args ...string) *exec.Cmd {
	t.Helper()
	out, err := os.Create(filepath.Join(e.dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin(name), append([]string{"-socket-path", e.nriSocket()}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // may have exited
		cmd.Wait()         //nolint:errcheck
		out.Close()
	})
	return cmd
}

// nriLog is what nri-logger wrote to its log file.
func nriLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// loggedEvent reports whether nri-logger logged event for the object id:
// it dumps each object as YAML, one "<event>:    <line>" log line each.
func loggedEvent(log, event, id string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, event+":") && strings.Contains(line, id) {
			return true
		}
	}
	return false
}

// waitLogged waits until nri-logger has logged each event for id.
func waitLogged(t *testing.T, path, id string, events ...string) {
	t.Helper()
	err := eventually(nriPluginTimeout, func() error {
		log := nriLog(t, path)
		for _, ev := range events {
			if !loggedEvent(log, ev, id) {
				return fmt.Errorf("no %s for %s", ev, short(id))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("nri-logger: %v\n%s", err, tail(nriLog(t, path), 60))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// nriSpec is the part of a container's OCI spec the NRI tests read.
type nriSpec struct {
	Process struct {
		Env []string `json:"env"`
	} `json:"process"`
	Mounts []struct {
		Destination string `json:"destination"`
		Source      string `json:"source"`
	} `json:"mounts"`
	Linux struct {
		Devices []struct {
			Path string `json:"path"`
		} `json:"devices"`
	} `json:"linux"`
}

func (e *env) nriSpec(t *testing.T, id string) nriSpec {
	t.Helper()
	_, info := e.containerStatus(t, id)
	var spec nriSpec
	if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
		t.Fatalf("runtime spec of %s: %v", short(id), err)
	}
	return spec
}

// waitNRISocket waits for the daemon's NRI socket.
func waitNRISocket(t *testing.T, e *env) {
	t.Helper()
	if err := eventually(nriPluginTimeout, func() error {
		_, err := os.Stat(e.nriSocket())
		return err
	}); err != nil {
		t.Fatalf("NRI socket: %v", err)
	}
}

// TestNRIExternalPlugins: plugins connecting on the NRI socket are handed
// the pods and containers that exist (Synchronize), see every pod and
// container event, and their adjustments — an environment variable, a
// bind mount and a device node — are in the container's spec and inside
// the container; a plugin that refuses a container fails CreateContainer
// with its reason and leaves nothing behind.
func TestNRIExternalPlugins(t *testing.T) {
	e, ti := newContainerEnv(t, "busybox")
	waitNRISocket(t, e)
	busybox := ti.ref("busybox")

	// A pod and a container from before the plugins connect.
	early := e.runTestPod(t, "nri-early")
	earlyCtr, _ := e.runContainer(t, early, containerConfig("early", busybox, ctrCommand("sleep", "1000")))

	logPath := filepath.Join(e.dir, "nri-logger.log")
	startNRIPlugin(t, e, "nri-logger", "-idx", "10", "-log-file", logPath, "-add-env", "NRI_LOGGER")
	startNRIPlugin(t, e, "nri-device-injector", "-idx", "20")
	waitLogged(t, logPath, early.id, "Synchronize")
	waitLogged(t, logPath, earlyCtr, "Synchronize")
	// The injector is registered once the daemon logs it (NRI's own log
	// lines go to podbay's log).
	if err := eventually(nriPluginTimeout, func() error {
		for _, line := range strings.Split(e.logTail(400), "\n") {
			if strings.Contains(line, "device-injector") && strings.Contains(line, "synchronized") {
				return nil
			}
		}
		return fmt.Errorf("nri-device-injector is not registered")
	}); err != nil {
		t.Fatalf("%v\n%s", err, e.logTail(60))
	}

	// Adjustments: the injector's mount and device, the logger's env.
	hostDir := filepath.Join(e.dir, "nri-mount")
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "hello"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := e.runTestPod(t, "nri-pod",
		withAnnotation("mounts.noderesource.dev/container.c1", fmt.Sprintf(
			"- source: %s\n  destination: /nri-mount\n  type: bind\n  options: [rbind, ro]\n", hostDir)),
		withAnnotation("devices.noderesource.dev/container.c1",
			"- path: /dev/nri-null\n  type: c\n  major: 1\n  minor: 3\n  file_mode: 0666\n"),
		withAnnotation("devices.noderesource.dev/container.bad", "- path: [not, a, path"),
	)
	waitLogged(t, logPath, pod.id, "RunPodSandbox")

	id := e.createContainer(t, pod, containerConfig("c1", busybox, ctrCommand("sleep", "1000")))
	waitLogged(t, logPath, id, "CreateContainer", "PostCreateContainer")
	e.startContainer(t, id)
	e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
	waitLogged(t, logPath, id, "StartContainer", "PostStartContainer")

	spec := e.nriSpec(t, id)
	if !hasEnvPrefix(spec.Process.Env, "NRI_LOGGER=logger-pid-") {
		t.Errorf("spec env has no NRI_LOGGER from nri-logger: %q", spec.Process.Env)
	}
	if !hasMount(spec, "/nri-mount", hostDir) {
		t.Errorf("spec has no /nri-mount from %s: %+v", hostDir, spec.Mounts)
	}
	if !hasDevice(spec, "/dev/nri-null") {
		t.Errorf("spec has no /dev/nri-null: %+v", spec.Linux.Devices)
	}
	if got := e.execOutput(t, id, "cat", "/nri-mount/hello"); got != "from the host\n" {
		t.Errorf("/nri-mount/hello in the container = %q", got)
	}
	if got := e.execOutput(t, id, "sh", "-c", "test -c /dev/nri-null && echo x > /dev/nri-null && echo ok"); got != "ok\n" {
		t.Errorf("device /dev/nri-null in the container: %q", got)
	}
	if got := e.execOutput(t, id, "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ | grep ^NRI_LOGGER="); !strings.HasPrefix(got, "NRI_LOGGER=logger-pid-") {
		t.Errorf("NRI_LOGGER in the container's environment: %q", got)
	}

	// UpdateContainerResources goes through the plugins.
	if _, err := e.rt.UpdateContainerResources(rpcCtx(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512},
	}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	waitLogged(t, logPath, id, "UpdateContainer", "PostUpdateContainer")

	// A container the injector refuses: a clear error, nothing made.
	before := containerDirs(t, e)
	_, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("bad", busybox, ctrCommand("sleep", "1000")))
	if err == nil {
		t.Fatal("CreateContainer succeeded although nri-device-injector refuses its annotation")
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "NRI") || !strings.Contains(msg, "invalid device annotation") {
		t.Errorf("CreateContainer error %q: want it to name NRI and the plugin's reason", msg)
	}
	for _, c := range e.listContainers(t, &runtimeapi.ContainerFilter{PodSandboxId: pod.id}) {
		if c.GetMetadata().GetName() == "bad" {
			t.Errorf("refused container %s is listed", short(c.Id))
		}
	}
	// None new (one removed earlier may go meanwhile, in RemoveContainer's
	// background release).
	if after := containerDirs(t, e); !subsetOf(after, before) {
		t.Errorf("container dirs after the refused create: %s, before: %s", after, before)
	}
	// The name is free again: a retry is refused for the same reason, not
	// because the name is reserved.
	if _, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("bad", busybox)); err == nil ||
		strings.Contains(err.Error(), "reserved") {
		t.Errorf("retry of the refused create: %v", err)
	}

	// Stop and removal events, for the container and the pods.
	e.stopContainer(t, id, 0)
	waitLogged(t, logPath, id, "StopContainer")
	e.removeContainer(t, id)
	waitLogged(t, logPath, id, "RemoveContainer")
	e.stopPod(t, pod.id)
	waitLogged(t, logPath, pod.id, "StopPodSandbox")
	e.removePod(t, pod.id)
	waitLogged(t, logPath, pod.id, "RemovePodSandbox")
	// A container exiting on its own is a StopContainer too.
	quitter, _ := e.runContainer(t, early, containerConfig("quitter", busybox, ctrShell("sleep 1; exit 3")))
	e.waitContainerState(t, quitter, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
	waitLogged(t, logPath, quitter, "StopContainer")
	e.stopPod(t, early.id)
	waitLogged(t, logPath, earlyCtr, "StopContainer")
	e.removePod(t, early.id)
}

// TestNRIPreRegisteredPlugin: a plugin in plugin_path is started by
// podbayd with its configuration from plugin_config_path, sees the events
// and adjusts containers; it ends with the daemon.
func TestNRIPreRegisteredPlugin(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	opts := envOptions{registries: insecureRegistry(r.Addr())}
	e := newEnv(t, opts)
	for _, name := range pushedImages {
		push(t, r, defaultSpec(t, "test", name))
	}
	pluginDir := filepath.Join(e.dir, "nri-plugins")
	confDir := filepath.Join(e.dir, "nri-conf.d")
	logPath := filepath.Join(e.dir, "prereg.log")
	for _, d := range []string{pluginDir, confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plugin := filepath.Join(pluginDir, "10-logger")
	if err := copyFile(bin("nri-logger"), plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("logFile: %s\nevents: [all]\naddEnv: NRI_PREREGISTERED\n", logPath)
	if err := os.WriteFile(filepath.Join(confDir, "10-logger.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	e.start("")
	image := testImages{reg: r}.ref("busybox")
	e.pullImage(t, image, nil)

	pod := e.runTestPod(t, "nri-prereg")
	waitLogged(t, logPath, pod.id, "RunPodSandbox")
	id, _ := e.runContainer(t, pod, containerConfig("c1", image, ctrCommand("sleep", "1000")))
	waitLogged(t, logPath, id, "CreateContainer", "StartContainer", "PostStartContainer")
	if spec := e.nriSpec(t, id); !hasEnvPrefix(spec.Process.Env, "NRI_PREREGISTERED=logger-pid-") {
		t.Errorf("spec env has no NRI_PREREGISTERED: %q", spec.Process.Env)
	}
	if got := e.execOutput(t, id, "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ | grep ^NRI_PREREGISTERED="); !strings.HasPrefix(got, "NRI_PREREGISTERED=logger-pid-") {
		t.Errorf("NRI_PREREGISTERED in the container: %q", got)
	}
	if pids := pidsOfExe(plugin); len(pids) != 1 {
		t.Errorf("pre-registered plugin processes: %v, want one", pids)
	}

	// A daemon killed outright takes its plugins with it: they exit when
	// their connection closes.
	e.kill9()
	if err := eventually(10*time.Second, func() error {
		if pids := pidsOfExe(plugin); len(pids) != 0 {
			return fmt.Errorf("plugin processes %v outlive the killed daemon", pids)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	e.start("")
	waitLogged(t, logPath, id, "Synchronize")

	// After a restart the plugin is started again and handed what exists.
	e.stop()
	if err := eventually(10*time.Second, func() error {
		if pids := pidsOfExe(plugin); len(pids) != 0 {
			return fmt.Errorf("plugin processes %v outlive the daemon", pids)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if err := os.Remove(logPath); err != nil {
		t.Fatal(err)
	}
	e.start("")
	waitLogged(t, logPath, id, "Synchronize")
	waitLogged(t, logPath, pod.id, "Synchronize")

	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)
	waitLogged(t, logPath, id, "RemoveContainer")
	waitLogged(t, logPath, pod.id, "RemovePodSandbox")
}

func hasEnvPrefix(env []string, prefix string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, prefix) {
			return true
		}
	}
	return false
}

func hasMount(spec nriSpec, dest, source string) bool {
	for _, m := range spec.Mounts {
		if m.Destination == dest && m.Source == source {
			return true
		}
	}
	return false
}

func hasDevice(spec nriSpec, path string) bool {
	for _, d := range spec.Linux.Devices {
		if d.Path == path {
			return true
		}
	}
	return false
}

// containerDirs lists the daemon's container directories.
func containerDirs(t *testing.T, e *env) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.rootDir, "containers"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, ent := range ents {
		names = append(names, short(ent.Name()))
	}
	return strings.Join(names, ",")
}

// subsetOf reports whether every name of the comma-separated list a is
// in b.
func subsetOf(a, b string) bool {
	have := map[string]bool{}
	for _, n := range strings.Split(b, ",") {
		have[n] = true
	}
	for _, n := range strings.Split(a, ",") {
		if n != "" && !have[n] {
			return false
		}
	}
	return true
}

// pidsOfExe lists the processes running the executable at path.
func pidsOfExe(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range ents {
		var pid int
		if _, err := fmt.Sscanf(ent.Name(), "%d", &pid); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", ent.Name(), "exe")); err == nil && exe == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestNRIDisabled: with [nri] enable = false no socket is made, no NRI
// code runs, and pods and containers work as ever.
func TestNRIDisabled(t *testing.T) {
	e, ti := newContainerEnvWith(t, envOptions{nriConfig: "enable = false"}, "busybox")
	pod := e.runTestPod(t, "nri-off")
	id, _ := e.runContainer(t, pod, containerConfig("c1", ti.ref("busybox"), ctrCommand("sleep", "1000")))
	if _, err := os.Stat(e.nriSocket()); !os.IsNotExist(err) {
		t.Errorf("NRI socket with NRI disabled: %v", err)
	}
	if strings.Contains(e.logTail(1000), "component=nri") {
		t.Errorf("NRI logged while disabled:\n%s", e.logTail(40))
	}
	e.stopContainer(t, id, 0)
	e.removeContainer(t, id)
	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)
}
