package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

const (
	// exitTimeout bounds how long a container that was told to exit, or
	// that exits by itself, may take to be reported EXITED.
	containerExitTimeout = 30 * time.Second
	// stateTimeout bounds how long a container may take to reach a state
	// the test waits for.
	containerStateTimeout = 15 * time.Second
)

// testImages are DefaultImages pushed to a registry of the test's own and
// pulled through the env's daemon.
type testImages struct {
	reg *testimage.Registry
	ids map[string]string // short name → image ID, for the pulled ones
}

// ref is the reference of a default image by its short name ("busybox").
func (ti testImages) ref(name string) string { return ti.reg.Reference("test/" + name + ":latest") }

// pushedImages are the default images every container env's registry holds.
var pushedImages = []string{"busybox", "user-uid", "user-name", "config"}

// newContainerEnv starts a registry holding pushedImages, an env whose
// daemon may pull from it, and the daemon, then pulls the named images.
func newContainerEnv(t *testing.T, pull ...string) (*env, testImages) {
	t.Helper()
	return newContainerEnvWith(t, envOptions{}, pull...)
}

// newContainerEnvWith is newContainerEnv with more env options.
func newContainerEnvWith(t *testing.T, opts envOptions, pull ...string) (*env, testImages) {
	t.Helper()
	r := startRegistry(t, testimage.Options{})
	opts.registries = insecureRegistry(r.Addr())
	e := newEnv(t, opts)
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

// testPod is a running pod and the configuration it was run with, which
// CreateContainer takes again.
type testPod struct {
	id  string
	cfg *runtimeapi.PodSandboxConfig
}

// logDir is the pod's log directory, which the kubelet creates.
func (p testPod) logDir() string { return p.cfg.GetLogDirectory() }

// runTestPod creates the pod's log directory, as the kubelet does, and runs
// the pod.
func (e *env) runTestPod(t *testing.T, name string, mods ...podMod) testPod {
	t.Helper()
	cfg := e.podConfig(name, mods...)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	return testPod{id: e.runPod(t, cfg, ""), cfg: cfg}
}

// ctrMod changes a container configuration.
type ctrMod func(*runtimeapi.ContainerConfig)

// containerConfig is a container as the kubelet would send it: the
// metadata name, attempt 0, the image, log path <name>.log, label
// container=<name>, the pod's network and IPC namespaces and its own PID
// namespace.
func containerConfig(name, image string, mods ...ctrMod) *runtimeapi.ContainerConfig {
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name},
		Image:       &runtimeapi.ImageSpec{Image: image},
		LogPath:     name + ".log",
		Labels:      map[string]string{"container": name, "podbay-test": "true"},
		Annotations: map[string]string{},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
	for _, m := range mods {
		m(cfg)
	}
	return cfg
}

// ctrCommand replaces the image's entrypoint (Kubernetes' command).
func ctrCommand(args ...string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Command = args }
}

// ctrShell runs script with sh -c.
func ctrShell(script string) ctrMod { return ctrCommand("sh", "-c", script) }

// ctrArgs replaces the image's cmd (Kubernetes' args).
func ctrArgs(args ...string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Args = args }
}

func ctrEnv(key, value string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: key, Value: []byte(value)})
	}
}

func ctrWorkingDir(dir string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.WorkingDir = dir }
}

func ctrMount(hostPath, containerPath string, readonly bool) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		c.Mounts = append(c.Mounts, &runtimeapi.Mount{HostPath: hostPath, ContainerPath: containerPath, Readonly: readonly})
	}
}

func ctrLabel(k, v string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Labels[k] = v }
}

func ctrAttempt(n uint32) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Metadata.Attempt = n }
}

func ctrRunAsUser(uid int64) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: uid}
	}
}

func ctrRunAsGroup(gid int64) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: gid}
	}
}

func ctrSupplementalGroups(gids ...int64) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.SupplementalGroups = gids }
}

func ctrCapabilities(add, drop []string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: add, DropCapabilities: drop}
	}
}

func ctrReadonlyRootfs() ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.ReadonlyRootfs = true }
}

func ctrMemoryLimit(bytes int64) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Linux.Resources.MemoryLimitInBytes = bytes }
}

func ctrPidMode(mode runtimeapi.NamespaceMode) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Linux.SecurityContext.NamespaceOptions.Pid = mode }
}

// tryCreateContainer creates a container in pod and returns the error.
func (e *env) tryCreateContainer(ctx context.Context, pod testPod, cfg *runtimeapi.ContainerConfig) (string, error) {
	resp, err := e.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
	if err != nil {
		return "", err
	}
	return resp.ContainerId, nil
}

// createContainer creates a container and fails the test if that fails.
func (e *env) createContainer(t *testing.T, pod testPod, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
	if err != nil {
		t.Fatalf("CreateContainer %s in %s: %v", cfg.GetMetadata().GetName(), short(pod.id), err)
	}
	if !hexID.MatchString(id) || len(id) != 64 {
		t.Fatalf("CreateContainer %s: ID %q, want 64 hex digits", cfg.GetMetadata().GetName(), id)
	}
	return id
}

func (e *env) startContainer(t *testing.T, id string) {
	t.Helper()
	if _, err := e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer %s: %v", short(id), err)
	}
}

// runContainer creates and starts a container and waits until it is
// reported RUNNING; it returns the ID and the init process's pid.
func (e *env) runContainer(t *testing.T, pod testPod, cfg *runtimeapi.ContainerConfig) (string, int) {
	t.Helper()
	id := e.createContainer(t, pod, cfg)
	e.startContainer(t, id)
	e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
	_, info := e.containerStatus(t, id)
	if info.Pid <= 0 {
		t.Fatalf("container %s is running with pid %d in its verbose status", short(id), info.Pid)
	}
	return id, info.Pid
}

func (e *env) stopContainer(t *testing.T, id string, timeout int64) {
	t.Helper()
	if _, err := e.rt.StopContainer(rpcCtx(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
		t.Fatalf("StopContainer %s: %v", short(id), err)
	}
}

func (e *env) removeContainer(t *testing.T, id string) {
	t.Helper()
	if _, err := e.rt.RemoveContainer(rpcCtx(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer %s: %v", short(id), err)
	}
}

// containerInfo is the JSON in verbose ContainerStatus Info["info"].
type containerInfo struct {
	ID          string          `json:"id"`
	SandboxID   string          `json:"sandboxID"`
	Pid         int             `json:"pid"`
	Bundle      string          `json:"bundle"`
	RuntimeSpec json.RawMessage `json:"runtimeSpec"`
}

// containerSpec is the part of a container's OCI spec the tests read.
type containerSpec struct {
	Process struct {
		Args []string `json:"args"`
	} `json:"process"`
	Linux struct {
		CgroupsPath string `json:"cgroupsPath"`
	} `json:"linux"`
}

// tryContainerStatus returns the verbose status, or the error.
func (e *env) tryContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, containerInfo, error) {
	var info containerInfo
	resp, err := e.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return nil, info, err
	}
	if resp.Status == nil {
		return nil, info, fmt.Errorf("ContainerStatus %s: no status", short(id))
	}
	raw, ok := resp.Info["info"]
	if !ok {
		return nil, info, fmt.Errorf("ContainerStatus %s verbose: no info[\"info\"]; keys %v", short(id), sortedKeys(resp.Info))
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return nil, info, fmt.Errorf("ContainerStatus %s: decode info: %v\n%s", short(id), err, raw)
	}
	return resp.Status, info, nil
}

// containerStatus returns the verbose status and its decoded info.
func (e *env) containerStatus(t *testing.T, id string) (*runtimeapi.ContainerStatus, containerInfo) {
	t.Helper()
	st, info, err := e.tryContainerStatus(rpcCtx(t), id)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", short(id), err)
	}
	return st, info
}

// containerRuntimeSpec decodes the OCI spec in the verbose status.
func (e *env) containerRuntimeSpec(t *testing.T, id string) containerSpec {
	t.Helper()
	_, info := e.containerStatus(t, id)
	var spec containerSpec
	if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
		t.Fatalf("runtime spec of %s: %v\n%s", short(id), err, info.RuntimeSpec)
	}
	return spec
}

// waitContainerState polls ContainerStatus until the container is in want.
func (e *env) waitContainerState(t *testing.T, id string, want runtimeapi.ContainerState, timeout time.Duration) *runtimeapi.ContainerStatus {
	t.Helper()
	var st *runtimeapi.ContainerStatus
	if err := eventually(timeout, func() error {
		var err error
		if st, _, err = e.tryContainerStatus(rpcCtx(t), id); err != nil {
			return err
		}
		if st.State != want {
			return fmt.Errorf("state %v", st.State)
		}
		return nil
	}); err != nil {
		t.Fatalf("container %s not %v within %v: %v\n%s", short(id), want, timeout, err, e.containerLogTail(st))
	}
	return st
}

// containerLogTail is the end of a container's log, for failure messages.
func (e *env) containerLogTail(st *runtimeapi.ContainerStatus) string {
	if st == nil || st.LogPath == "" {
		return "(no log)"
	}
	return "container log:\n" + fileTail(st.LogPath, 20)
}

func (e *env) listContainers(t *testing.T, filter *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	t.Helper()
	resp, err := e.rt.ListContainers(rpcCtx(t), &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	return resp.Containers
}

func containerIDs(cs []*runtimeapi.Container) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, fmt.Sprintf("%s(%s,%s)", short(c.Id), c.GetMetadata().GetName(), c.State))
	}
	return ids
}

// execSync runs cmd in a container with a timeout in seconds and fails the
// test if the call fails (a non-zero exit is not a failure of the call).
func (e *env) execSync(t *testing.T, id string, timeout int64, cmd ...string) *runtimeapi.ExecSyncResponse {
	t.Helper()
	resp, err := e.rt.ExecSync(rpcCtx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: timeout})
	if err != nil {
		t.Fatalf("ExecSync %q in %s: %v", cmd, short(id), err)
	}
	return resp
}

// execOutput runs cmd, requires exit code 0 and returns its stdout.
func (e *env) execOutput(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	resp := e.execSync(t, id, 10, cmd...)
	if resp.ExitCode != 0 {
		t.Fatalf("ExecSync %q in %s: exit code %d, stdout %q, stderr %q", cmd, short(id), resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return string(resp.Stdout)
}

// probe runs a container to completion and returns what it logged and its
// final status; the container is removed.
func (e *env) probe(t *testing.T, pod testPod, cfg *runtimeapi.ContainerConfig) (string, *runtimeapi.ContainerStatus) {
	t.Helper()
	id := e.createContainer(t, pod, cfg)
	defer e.removeContainer(t, id)
	e.startContainer(t, id)
	st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
	lines, err := readCRILog(st.LogPath)
	if err != nil {
		t.Fatalf("log of %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return logText(lines), st
}

// probeOK is probe for a container that must exit 0; it returns the log.
func (e *env) probeOK(t *testing.T, pod testPod, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	out, st := e.probe(t, pod, cfg)
	if st.ExitCode != 0 {
		t.Fatalf("%s exited with %d (%s), want 0; log:\n%s", cfg.GetMetadata().GetName(), st.ExitCode, st.Reason, out)
	}
	return out
}

// criLogLine is one line of a CRI log file:
// "<RFC3339Nano time> <stdout|stderr> <F|P> <content>".
type criLogLine struct {
	time    time.Time
	stream  string
	tag     string // F: the line is complete; P: partial, continued by the next
	content string
}

// readCRILog parses a CRI log file; any line not in the format is an
// error.
func readCRILog(path string) ([]criLogLine, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCRILog(string(data))
}

func parseCRILog(data string) ([]criLogLine, error) {
	// The writer may be between a line and its newline.
	data = data[:strings.LastIndexByte(data, '\n')+1]
	if data == "" {
		return nil, nil
	}
	var out []criLogLine
	for i, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		fs := strings.SplitN(line, " ", 4)
		if len(fs) < 3 {
			return nil, fmt.Errorf("line %d %q is not in the CRI log format", i+1, line)
		}
		ts, err := time.Parse(time.RFC3339Nano, fs[0])
		if err != nil {
			return nil, fmt.Errorf("line %d %q: time: %v", i+1, line, err)
		}
		if fs[1] != "stdout" && fs[1] != "stderr" {
			return nil, fmt.Errorf("line %d %q: stream %q", i+1, line, fs[1])
		}
		if fs[2] != "F" && fs[2] != "P" {
			return nil, fmt.Errorf("line %d %q: tag %q", i+1, line, fs[2])
		}
		l := criLogLine{time: ts, stream: fs[1], tag: fs[2]}
		if len(fs) == 4 {
			l.content = fs[3]
		}
		out = append(out, l)
	}
	return out, nil
}

// logText joins the log's lines as the container wrote them, both
// streams, partial lines continued.
func logText(lines []criLogLine) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.content)
		if l.tag == "F" {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// waitLogLine polls the log at path until a complete line on stream has
// content want, and returns it.
func waitLogLine(t *testing.T, path, stream, want string, timeout time.Duration) criLogLine {
	t.Helper()
	var found criLogLine
	var lines []criLogLine
	if err := eventually(timeout, func() error {
		var err error
		if lines, err = readCRILog(path); err != nil {
			return err
		}
		for _, l := range lines {
			if l.stream == stream && l.tag == "F" && l.content == want {
				found = l
				return nil
			}
		}
		return errors.New("not logged")
	}); err != nil {
		t.Fatalf("log %s: no %s line %q within %v: %v\n%s", path, stream, want, timeout, err, fileTail(path, 20))
	}
	return found
}

// conmonsOf lists the conmon processes that monitor container id.
func conmonsOf(id string) []int {
	var pids []int
	for _, p := range readProcs() {
		if p.state != "Z" && strings.Contains(p.cmdline, "conmon") && strings.Contains(p.cmdline, "--cid "+id) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// monitorsOf lists the processes that monitor container id: its conmon
// (oci handlers), or the shim its init process is a child of (vm
// handlers, whose runc keeps its state under the env's runtime_root).
func (e *env) monitorsOf(id string) []int {
	if suiteRuntimeType != "vm" {
		return conmonsOf(id)
	}
	// The shim's runtime keeps the container's init pid in its state dir:
	// runc in state.json (init_process_pid), crun in status (pid).
	dir := filepath.Join(e.stateDir, "shim-runc", "runc", "podbay", id)
	var st struct {
		InitProcessPid int `json:"init_process_pid"`
		Pid            int `json:"pid"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		data, err = os.ReadFile(filepath.Join(dir, "status"))
	}
	if err != nil || json.Unmarshal(data, &st) != nil {
		return nil
	}
	st.InitProcessPid = cmp.Or(st.InitProcessPid, st.Pid)
	procs := readProcs()
	p := procs[st.InitProcessPid]
	if p == nil || p.state == "Z" {
		return nil
	}
	if sh := procs[p.ppid]; sh != nil && sh.state != "Z" && strings.Contains(sh.cmdline, "containerd-shim") {
		return []int{sh.pid}
	}
	return nil
}

// requireNoMonitor polls until nothing monitors container id.
func (e *env) requireNoMonitor(t *testing.T, id string) {
	t.Helper()
	if err := eventually(settleTime, func() error {
		if pids := e.monitorsOf(id); len(pids) > 0 {
			return fmt.Errorf("monitors %v", pids)
		}
		return nil
	}); err != nil {
		t.Errorf("container %s: still monitored after it was stopped and removed: %v", short(id), err)
	}
}

// cgroupFile reads a file of the cgroup v1 hierarchy of controller that
// process pid is in, from the host.
func cgroupFile(t *testing.T, pid int, controller, file string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("cgroups of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return strings.TrimSpace(readHostFile(t, filepath.Join("/sys/fs/cgroup", parts[1], parts[2], file)))
			}
		}
	}
	t.Fatalf("pid %d is in no %s cgroup:\n%s", pid, controller, data)
	return ""
}

// capEff decodes the CapEff line of /proc/<pid>/status output.
func capEff(status string) (uint64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff line in %q", status)
}

// Capability bits (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
)

// defaultCapMask is the default capability set of containerd and CRI-O
// (Docker's): CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID,
// SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD, AUDIT_WRITE,
// SETFCAP.
const defaultCapMask = 0xa80425fb

// withContainersOf returns keep plus the containers the runtime wrapper
// created in a kept sandbox: a live pod's containers are the pod's.
func (e *env) withContainersOf(keep map[string]bool) map[string]bool {
	out := make(map[string]bool, len(keep))
	for id := range keep {
		out[id] = true
	}
	for _, r := range e.createRecords() {
		if sb := r.Annotations["io.kubernetes.cri.sandbox-id"]; sb != "" && keep[sb] && r.ContainerID != "" {
			out[r.ContainerID] = true
		}
	}
	return out
}

// requireLeakCheckerSeesContainer is the positive control for the
// container part of the leak checker: with its pod not kept, the running
// container's root filesystem, rootfs mount, conmon, cgroup and runtime
// state are reported; with the pod kept, nothing is.
func (e *env) requireLeakCheckerSeesContainer(t *testing.T, podID, id string) {
	t.Helper()
	for _, l := range e.findLeaks(keepSet([]string{podID})) {
		t.Errorf("leak checker control: reported although the container's pod is kept: %s", l)
	}
	merged := ""
	if cs, err := e.storageContainers(); err == nil {
		for _, c := range cs {
			if c.ID == id {
				merged = filepath.Join(e.storageRoot, "overlay", c.Layer, "merged")
			}
		}
	}
	if merged == "" {
		t.Errorf("no containers/storage container for container %s", short(id))
	}
	seen := map[string]bool{}
	for _, l := range e.findLeaks(nil) {
		switch {
		case l.kind == "mount" && l.path == merged:
			seen["mount"] = true
		case l.kind == "storage" && l.path == id,
			l.kind == "process" && strings.Contains(l.what, id),
			// A vm handler's container runs under its pod's shim.
			l.kind == "process" && suiteRuntimeType == "vm" && strings.Contains(l.what, podID),
			l.kind == "cgroup" && strings.Contains(l.path, id),
			l.kind == "runtime" && filepath.Base(l.path) == id:
			seen[l.kind] = true
		}
	}
	for _, k := range []string{"storage", "mount", "process", "cgroup", "runtime"} {
		if !seen[k] {
			t.Errorf("leak checker control: no %s resource of container %s reported with its pod not kept", k, short(id))
		}
	}
}

// sortGroups sorts the numbers of the third line of "id -u; id -g; id -G"
// output: id -G prints the primary group first.
func sortGroups(out string) string {
	lines := strings.Split(out, "\n")
	if len(lines) < 3 {
		return out
	}
	gids := strings.Fields(lines[2])
	slices.SortFunc(gids, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	lines[2] = strings.Join(gids, " ")
	return strings.Join(lines, "\n")
}
