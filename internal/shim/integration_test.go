package shim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/test/testbundle"
)

// The integration tests run the real containerd-shim-runc-v2 with runc.
// They need root and are skipped otherwise. runc keeps its state in a
// directory of the test's (RuncOptions), every ID starts with a prefix
// unique to the test process, and every test checks at the end that
// nothing is left: processes, shim sockets, runc state, FIFOs, mounts.

const (
	shimBinary  = "/usr/bin/containerd-shim-runc-v2"
	runcPath    = "/usr/sbin/runc"
	busyboxPath = "/bin/busybox"
	// testCgroupParent holds the containers' cgroups (cgroupfs driver).
	testCgroupParent = "/podbay-shim-test"
	// shimCgroup is where the pods' shims are moved (CreateOptions.MonitorCgroup).
	shimCgroup    = testCgroupParent + "/shims"
	testNamespace = "podbaytest"
)

type testEnv struct {
	t        *testing.T
	dir      string
	busybox  string
	runcRoot string
	cfg      Config
	rt       *Runtime
	// containers and pods the test made, deleted at the end (containers
	// first).
	containers, pods []string
}

// newTestEnv makes the test's environment and a context for its calls
// that ends after timeout, or with the test.
func newTestEnv(t *testing.T, timeout time.Duration) (*testEnv, context.Context) {
	t.Helper()
	dir, busybox := testbundle.Host(t, busyboxPath, shimBinary, runcPath)
	e := &testEnv{t: t, dir: dir, busybox: busybox, runcRoot: filepath.Join(dir, "runc")}
	opts, err := RuncOptions(runcPath, e.runcRoot)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = Config{
		Name:      "shim-test",
		ShimPath:  shimBinary,
		StateDir:  filepath.Join(dir, "state"),
		Namespace: testNamespace,
		Options:   opts,
	}
	t.Cleanup(e.cleanup)
	e.rt = e.newRuntime()
	return e, testbundle.Context(t, timeout)
}

// newRuntime starts a Runtime on the test's state, closed at the end.
func (e *testEnv) newRuntime() *Runtime {
	return testbundle.Open(e.t, func() (*Runtime, error) { return New(e.cfg) })
}

func (e *testEnv) newID(name string) string {
	return testbundle.NewID("podbayshimtest", name)
}

// bundle writes the bundle of container id in pod (pod == id: the
// sandbox) running args in busybox.
func (e *testEnv) bundle(id, pod string, mutate func(*specs.Spec), args ...string) string {
	e.t.Helper()
	b := filepath.Join(e.dir, "bundles", id)
	kind := "container"
	if pod == id {
		kind = containerTypeSandbox
	}
	spec := testbundle.Spec(filepath.Join(b, "rootfs"), testCgroupParent+"/"+id, args...)
	spec.Hostname = "podbayshimtest"
	spec.Process.Env = append(spec.Process.Env, "GREETING=hello")
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}})
	spec.Annotations = map[string]string{annotationContainerType: kind, annotationSandboxID: pod}
	if mutate != nil {
		mutate(spec)
	}
	if err := testbundle.Write(b, e.busybox, spec); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// startPod creates and starts a sandbox container (the pod's shim) and
// returns its ID.
func (e *testEnv) startPod(ctx context.Context, r *Runtime, name string) string {
	e.t.Helper()
	id := e.newID(name)
	e.pods = append(e.pods, id)
	e.create(ctx, r, runtime.CreateOptions{ID: id, BundleDir: e.bundle(id, id, nil, "sleep", "1000"), MonitorCgroup: shimCgroup})
	if err := r.Start(ctx, id); err != nil {
		e.t.Fatalf("Start sandbox %s: %v", id, err)
	}
	return id
}

// newContainer writes a bundle for a new container in pod and returns its
// ID and create options (with a log file).
func (e *testEnv) newContainer(pod, name string, mutate func(*specs.Spec), args ...string) (string, runtime.CreateOptions) {
	id := e.newID(name)
	e.containers = append(e.containers, id)
	return id, runtime.CreateOptions{ID: id, BundleDir: e.bundle(id, pod, mutate, args...), LogPath: filepath.Join(e.dir, id+".log")}
}

func (e *testEnv) create(ctx context.Context, r *Runtime, opts runtime.CreateOptions) int {
	e.t.Helper()
	return testbundle.Create(ctx, e.t, r, opts)
}

// run creates and starts a container in pod.
func (e *testEnv) run(ctx context.Context, r *Runtime, pod, name string, mutate func(*specs.Spec), args ...string) (string, runtime.CreateOptions) {
	e.t.Helper()
	id, opts := e.newContainer(pod, name, mutate, args...)
	e.create(ctx, r, opts)
	if err := r.Start(ctx, id); err != nil {
		e.t.Fatalf("Start %s: %v", id, err)
	}
	return id, opts
}

// cleanup deletes everything the test made with a new Runtime and checks
// that nothing is left.
func (e *testEnv) cleanup() {
	t := e.t
	testbundle.DeleteAll(t, func() (*Runtime, error) { return New(e.cfg) }, append(append([]string(nil), e.containers...), e.pods...))
	e.assertNoLeaks()
	for _, id := range append(append([]string(nil), e.containers...), e.pods...) {
		testbundle.RemoveCgroup(t, testCgroupParent+"/"+id)
	}
	testbundle.RemoveCgroup(t, shimCgroup)
	testbundle.RemoveCgroup(t, testCgroupParent)
}

// assertNoLeaks checks that nothing of the test's pods and containers is
// left on the host.
func (e *testEnv) assertNoLeaks() {
	t := e.t
	t.Helper()
	for _, id := range append(append([]string(nil), e.containers...), e.pods...) {
		testbundle.CheckNoProcesses(t, id)
	}
	for _, pod := range e.pods {
		if _, err := os.Lstat(e.shimSocket(pod)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("shim socket left for pod %s: %v", pod, err)
		}
	}
	// runc-v2 keeps runc's state in <Root>/<namespace>.
	runcState := filepath.Join(e.runcRoot, testNamespace)
	if entries, _ := os.ReadDir(runcState); len(entries) > 0 {
		out, _ := exec.Command(runcPath, "--root", runcState, "list").CombinedOutput()
		t.Errorf("runc state left:\n%s", out)
	}
	_ = filepath.WalkDir(e.cfg.StateDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("state left: %s", path)
		}
		return nil
	})
	for _, id := range append(append([]string(nil), e.containers...), e.pods...) {
		for _, name := range append([]string{shimLogFifo, shimAddressFile}, shimBundleFiles...) {
			if _, err := os.Lstat(filepath.Join(e.dir, "bundles", id, name)); err == nil {
				t.Errorf("%s left in the bundle of %s", name, id)
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mi), e.dir) {
		t.Errorf("mounts left under %s", e.dir)
	}
}

// shimSocket is the socket the runc-v2 shim makes for pod: containerd's
// shim.SocketAddress of the -address it was given.
func (e *testEnv) shimSocket(pod string) string {
	sum := sha256.Sum256([]byte(filepath.Join(filepath.Join(e.cfg.StateDir, eventsSocket), testNamespace, pod)))
	return "/run/containerd/s/" + hex.EncodeToString(sum[:])
}

// shimsOf lists the pids of running shims started with -id id.
func shimsOf(id string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if testbundle.IsZombie(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || args[0] != shimBinary {
			continue
		}
		for i := 1; i+1 < len(args); i++ {
			if args[i] == "-id" && args[i+1] == id {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIntegrationPodLifecycle(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt

	pod := e.startPod(ctx, r, "pod")
	sbState, err := r.State(ctx, pod)
	if err != nil || sbState.Status != runtime.StatusRunning || sbState.MonitorPid <= 0 || sbState.Pid <= 0 {
		t.Fatalf("sandbox State = %+v, %v", sbState, err)
	}

	id, opts := e.newContainer(pod, "life", nil, "sh", "-c", `echo hello; echo oops >&2; printf partial; trap "" TERM; sleep 100`)
	pid := e.create(ctx, r, opts)
	st, err := r.State(ctx, id)
	if err != nil || st.Status != runtime.StatusCreated || st.Pid != pid || st.Bundle != opts.BundleDir || st.Created.IsZero() {
		t.Fatalf("State after Create = %+v, %v (pid %d)", st, err, pid)
	}
	// One shim serves the pod: the container's monitor is the sandbox's.
	if st.MonitorPid != sbState.MonitorPid {
		t.Errorf("container's shim %d, sandbox's %d", st.MonitorPid, sbState.MonitorPid)
	}
	if shims := shimsOf(pod); len(shims) != 1 || shims[0] != sbState.MonitorPid {
		t.Errorf("shims of the pod: %v, want [%d]", shims, sbState.MonitorPid)
	}
	if shims := shimsOf(id); len(shims) != 0 {
		t.Errorf("the container has a shim of its own: %v", shims)
	}
	// The shim lives in the cgroup it was given, not the daemon's.
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sbState.MonitorPid)); err != nil || !strings.Contains(string(cg), ":"+shimCgroup+"\n") {
		t.Errorf("shim's cgroups (%v):\n%s\nwant %s", err, cg, shimCgroup)
	}
	if _, err := r.Create(ctx, opts); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Create = %v, want ErrAlreadyExists", err)
	}

	testbundle.CheckStart(ctx, t, r, id, pid)
	// The process ignores SIGTERM: Stop waits out the timeout, then kills.
	testbundle.WaitFor(5*time.Second, func() bool { return strings.Contains(readFile(t, opts.LogPath), "oops") })
	testbundle.CheckStopAfterTimeout(ctx, t, r, id)
	if err := r.ReopenLog(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ReopenLog of a stopped container = %v, want ErrFailedPrecondition", err)
	}
	logData := readFile(t, opts.LogPath)
	for _, want := range []string{" stdout F hello\n", " stderr F oops\n", " stdout P partial\n"} {
		if !strings.Contains(logData, want) {
			t.Errorf("container log %q lacks %q", logData, want)
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(logData, "\n"), "\n") {
		ts, _, _ := strings.Cut(line, " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("log line %q: %v", line, err)
		}
	}

	testbundle.CheckDelete(ctx, t, r, id)

	if err := r.Stop(ctx, pod, 0, syscall.SIGKILL); err != nil {
		t.Fatalf("Stop sandbox: %v", err)
	}
	if exit, ok, _ := r.Exited(pod); !ok || exit.Code != 137 {
		t.Errorf("sandbox Exited = %+v, %v", exit, ok)
	}
	// Its last task stopped: the pod's shim is given back at once.
	if shims := shimsOf(pod); len(shims) != 0 {
		t.Errorf("shim still running after the pod's last task stopped: %v", shims)
	}
	if err := r.Delete(ctx, pod); err != nil {
		t.Fatalf("Delete sandbox: %v", err)
	}
	if shims := shimsOf(pod); len(shims) != 0 {
		t.Errorf("shim still running after the sandbox's Delete: %v", shims)
	}
	if _, err := os.Lstat(e.shimSocket(pod)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shim socket after Delete: %v", err)
	}
}

// TestIntegrationStoppedPodReleasesShim: the shim stays while any task of
// the pod runs, and is shut down when the last one exits, whatever the
// order; the stopped pod's records answer until Delete.
func TestIntegrationStoppedPodReleasesShim(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt

	pod := e.startPod(ctx, r, "release")
	id, opts := e.newContainer(pod, "late", nil, "sh", "-c", "sleep 2")
	e.create(ctx, r, opts)
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The sandbox first (as when the pause process dies): a task still
	// runs, so the shim stays.
	if err := r.Stop(ctx, pod, 0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if shims := shimsOf(pod); len(shims) != 1 {
		t.Fatalf("shims of the pod while a container runs: %v, want one", shims)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("container State with the sandbox stopped = %+v, %v", st, err)
	}
	// The container exits on its own: the exit watcher releases the shim.
	if st, err := r.Wait(ctx, id); err != nil || st.Code != 0 {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	testbundle.WaitFor(10*time.Second, func() bool { return len(shimsOf(pod)) == 0 })
	if shims := shimsOf(pod); len(shims) != 0 {
		t.Fatalf("shim still running after the pod's last task exited: %v", shims)
	}
	if _, err := os.Lstat(e.shimSocket(pod)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("released shim's socket: %v", err)
	}
	for _, cid := range []string{pod, id} {
		if st, err := r.State(ctx, cid); err != nil || st.Status != runtime.StatusStopped {
			t.Errorf("State of %s after the release = %+v, %v", cid, st, err)
		}
		if _, ok, err := r.Exited(cid); !ok || err != nil {
			t.Errorf("Exited of %s after the release = %v, %v", cid, ok, err)
		}
	}
	if err := r.Start(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Start in a released pod = %v, want ErrFailedPrecondition", err)
	}
	// A restarted Runtime finds the stopped pod as it was.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := e.newRuntime()
	for _, cid := range []string{pod, id} {
		if _, ok, err := r2.Exited(cid); !ok || err != nil {
			t.Errorf("Exited of %s after the restart = %v, %v", cid, ok, err)
		}
	}
	if err := r2.Delete(ctx, id); err != nil {
		t.Errorf("Delete container of a released pod: %v", err)
	}
	if err := r2.Delete(ctx, pod); err != nil {
		t.Errorf("Delete released pod: %v", err)
	}
}

func TestIntegrationExitCodes(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")

	id, opts := e.newContainer(pod, "exit3", nil, "sh", "-c", "sleep 0.2; echo bye; exit 3")
	e.create(ctx, r, opts)
	got := make(chan error, 1)
	go func() {
		exit, err := r.Wait(ctx, id)
		if err == nil && exit.Code != 3 {
			err = fmt.Errorf("exit code %d, want 3", exit.Code)
		}
		got <- err
	}()
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// The output is in the log once the exit is reported.
	if logData := readFile(t, opts.LogPath); !strings.Contains(logData, " stdout F bye\n") {
		t.Errorf("log at exit = %q", logData)
	}
	if err := r.Stop(ctx, id, time.Second, 0); err != nil {
		t.Errorf("Stop of an exited container: %v", err)
	}

	// PID 1 of a pid namespace only gets signals it handles.
	graceful, _ := e.run(ctx, r, pod, "graceful", nil, "sh", "-c", `trap "exit 7" TERM; sleep 100 & wait`)
	// The trap is set once the shell has started its sleep: a SIGTERM
	// before that is ignored by PID 1, and Stop would wait it out.
	st, err := r.State(ctx, graceful)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	testbundle.WaitForChild(t, st.Pid, "sleep")
	start := time.Now()
	if err := r.Stop(ctx, graceful, 30*time.Second, syscall.SIGTERM); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %v for a process that exits on SIGTERM", d)
	}
	if exit, ok, err := r.Exited(graceful); err != nil || !ok || exit.Code != 7 {
		t.Errorf("Exited = (%+v, %v, %v), want 7", exit, ok, err)
	}

	// Stop of a created container that never ran.
	created, opts := e.newContainer(pod, "created", nil, "sleep", "100")
	e.create(ctx, r, opts)
	if err := r.Stop(ctx, created, 0, 0); err != nil {
		t.Fatalf("Stop of a created container: %v", err)
	}
	if exit, ok, err := r.Exited(created); err != nil || !ok || exit.Code != 137 {
		t.Errorf("Exited after Stop = (%+v, %v, %v), want 137", exit, ok, err)
	}

	// A container of a pod that has no shim.
	_, orphan := e.newContainer(e.newID("nopod"), "orphan", nil, "true")
	if _, err := r.Create(ctx, orphan); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Create in a pod without a shim = %v, want ErrFailedPrecondition", err)
	}
}

func TestIntegrationCreateFailure(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")

	// runc cannot start the process: Create fails with runc's message and
	// leaves nothing, not even the log file.
	id, opts := e.newContainer(pod, "missing", nil, "/bin/nonexistent")
	if _, err := r.Create(ctx, opts); err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Fatalf("Create = %v, want runc's complaint about the executable", err)
	}
	if _, err := os.Stat(opts.LogPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log file left: %v", err)
	}
	if _, err := os.Stat(r.containerDir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state left: %v", err)
	}

	// A sandbox whose runc fails: the shim started for it is stopped.
	bad := e.newID("badpod")
	e.pods = append(e.pods, bad)
	badOpts := runtime.CreateOptions{ID: bad, BundleDir: e.bundle(bad, bad, nil, "/bin/nonexistent")}
	if _, err := r.Create(ctx, badOpts); err == nil {
		t.Fatal("Create of a failing sandbox succeeded")
	}
	if shims := shimsOf(bad); len(shims) != 0 {
		t.Errorf("shim left after a failed sandbox Create: %v", shims)
	}
	if _, err := os.Lstat(e.shimSocket(bad)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shim socket left after a failed sandbox Create: %v", err)
	}

	// Options with anypb's type URL: the shim's typeurl does not know
	// it, which shows that RuncOptions' URL is the one that works.
	wrong, err := anypb.New(&runcoptions.Options{BinaryName: runcPath, Root: e.runcRoot})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Options = wrong
	cfg.StateDir = filepath.Join(e.dir, "state2")
	r2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	other := e.newID("wrongopts")
	e.pods = append(e.pods, other)
	_, err = r2.Create(ctx, runtime.CreateOptions{ID: other, BundleDir: e.bundle(other, other, nil, "sleep", "10")})
	if err == nil || !strings.Contains(err.Error(), "type.googleapis.com/containerd.runc.v1.Options") {
		t.Fatalf("Create with a wrong options type URL = %v", err)
	}
	t.Logf("wrong options: %v", err)
	if shims := shimsOf(other); len(shims) != 0 {
		t.Errorf("shim left after a failed start: %v", shims)
	}
}

func TestIntegrationUnknownID(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	id := e.newID("ghost")
	if _, err := r.State(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("State = %v, want ErrNotFound", err)
	}
	if err := r.Start(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Start = %v, want ErrNotFound", err)
	}
	if _, err := r.Wait(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Wait = %v, want ErrNotFound", err)
	}
	if _, err := r.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"true"}}); !errdefs.IsNotFound(err) {
		t.Errorf("ExecSync = %v, want ErrNotFound", err)
	}
	if err := r.ReopenLog(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("ReopenLog = %v, want ErrNotFound", err)
	}
	for range 2 {
		if err := r.Stop(ctx, id, time.Second, 0); err != nil {
			t.Errorf("Stop = %v, want nil", err)
		}
		if err := r.Delete(ctx, id); err != nil {
			t.Errorf("Delete = %v, want nil", err)
		}
	}
	if _, ok, err := r.Exited(id); ok || err != nil {
		t.Errorf("Exited = %v, %v", ok, err)
	}
	if _, err := r.State(ctx, "../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("State of a bad ID = %v, want ErrInvalidArgument", err)
	}
}
