package oci

import (
	"context"
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

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/test/testbundle"
)

// The integration tests run the real conmon and runc. They need root and
// are skipped otherwise. Every container ID starts with a prefix unique to
// the test process, so the leak checks only ever look at processes these
// tests started.

const (
	runcPath    = "/usr/sbin/runc"
	conmonPath  = "/usr/bin/conmon"
	busyboxPath = "/bin/busybox"
	// testCgroupParent holds the containers' cgroups (cgroupfs driver).
	testCgroupParent = "/podbay-test"
)

type testEnv struct {
	t       *testing.T
	dir     string
	busybox string
	cfg     Config
	rt      *Runtime
	ids     []string
	cgroups []string // conmon cgroups to remove at the end
}

// newTestEnv makes the test's environment and a context for its calls
// that ends after timeout, or with the test.
func newTestEnv(t *testing.T, timeout time.Duration) (*testEnv, context.Context) {
	t.Helper()
	dir, busybox := testbundle.Host(t, busyboxPath, runcPath, conmonPath)
	e := &testEnv{t: t, dir: dir, busybox: busybox}
	e.cfg = Config{
		Name:             "runc",
		RuntimePath:      runcPath,
		RuntimeRoot:      filepath.Join(dir, "runc"),
		ConmonPath:       conmonPath,
		ExitDir:          filepath.Join(dir, "exits"),
		SocketDir:        filepath.Join(dir, "socks"),
		ConmonLogLevel:   "debug",
		ExitPollInterval: 500 * time.Millisecond,
	}
	e.rt = e.newRuntime()
	t.Cleanup(e.cleanup)
	return e, testbundle.Context(t, timeout)
}

func (e *testEnv) newRuntime() *Runtime {
	return testbundle.Open(e.t, func() (*Runtime, error) { return New(e.cfg) })
}

// newID returns a container ID unique to this test process.
func (e *testEnv) newID(name string) string {
	id := testbundle.NewID("podbaytest", name)
	e.ids = append(e.ids, id)
	return id
}

// bundle writes a bundle for id running args in busybox and returns it.
func (e *testEnv) bundle(id string, mutate func(*specs.Spec), args ...string) string {
	e.t.Helper()
	b := filepath.Join(e.dir, "bundles", id)
	spec := testbundle.Spec("rootfs", testCgroupParent+"/"+id, args...)
	spec.Hostname = "podbaytest"
	if mutate != nil {
		mutate(spec)
	}
	if err := testbundle.Write(b, e.busybox, spec); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// create creates a container.
func (e *testEnv) create(ctx context.Context, r *Runtime, opts runtime.CreateOptions) int {
	e.t.Helper()
	return testbundle.Create(ctx, e.t, r, opts)
}

// cleanup deletes every container the test made and checks that nothing
// is left: no process with one of the IDs on its command line or in its
// cgroup, no runtime state, no exit files, no attach links, no cgroups.
func (e *testEnv) cleanup() {
	t := e.t
	testbundle.DeleteAll(t, func() (*Runtime, error) { return New(e.cfg) }, e.ids)
	e.assertNoLeaks(e.ids...)
	for _, cg := range e.cgroups {
		testbundle.RemoveCgroup(t, cg)
	}
	testbundle.RemoveCgroup(t, testCgroupParent)
}

func (e *testEnv) assertNoLeaks(ids ...string) {
	t := e.t
	t.Helper()
	for _, id := range ids {
		// conmon may still be on its way out; it is reaped by init.
		testbundle.CheckNoProcesses(t, id)
		if _, err := os.Lstat(filepath.Join(e.cfg.ExitDir, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("exit file left for %s", id)
		}
		if _, err := os.Lstat(filepath.Join(e.cfg.SocketDir, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("attach link left for %s", id)
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", testCgroupParent, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup left for %s", id)
		}
	}
	out, err := exec.Command(runcPath, "--root", e.cfg.RuntimeRoot, "list", "-q").CombinedOutput()
	if err != nil {
		t.Errorf("runc list: %v: %s", err, out)
	} else if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("runtime state left: %q", s)
	}
}

func TestIntegrationLifecycle(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)
	r := e.rt

	id := e.newID("life")
	conmonCgroup := "/podbay-test-conmon-" + strconv.Itoa(os.Getpid())
	e.cgroups = append(e.cgroups, conmonCgroup)
	logPath := filepath.Join(e.dir, id+".log")
	bundle := e.bundle(id, nil, "sh", "-c", `echo hello; echo oops >&2; trap "" TERM; sleep 100`)
	pid := e.create(ctx, r, runtime.CreateOptions{ID: id, BundleDir: bundle, LogPath: logPath, MonitorCgroup: conmonCgroup})

	st, err := r.State(ctx, id)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if st.Status != runtime.StatusCreated || st.Pid != pid || st.Bundle != bundle || st.MonitorPid <= 0 || st.Created.IsZero() {
		t.Fatalf("State after Create = %+v (pid %d)", st, pid)
	}
	monitor := st.MonitorPid
	// conmon is detached: not our child, not in our process group, and in
	// the cgroup it was asked to join.
	if ppid, pgid := procStat(t, monitor); ppid == os.Getpid() || pgid == syscall.Getpgrp() {
		t.Errorf("conmon %d has ppid %d, pgid %d: still attached to the test process", monitor, ppid, pgid)
	}
	if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", monitor)); !strings.Contains(string(cg), ":memory:"+conmonCgroup+"\n") {
		t.Errorf("conmon cgroups:\n%s\nwant memory:%s", cg, conmonCgroup)
	}

	testbundle.CheckStart(ctx, t, r, id, pid)
	if err := r.Start(ctx, id); err == nil {
		t.Error("second Start succeeded")
	}

	// The process ignores SIGTERM: Stop must wait out the timeout, then kill.
	testbundle.CheckStopAfterTimeout(ctx, t, r, id)
	if err := r.Kill(ctx, id, syscall.SIGTERM, false); err != nil {
		t.Errorf("Kill of a stopped container: %v", err)
	}

	logData, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("container log: %v", err)
	}
	for _, want := range []string{" stdout F hello\n", " stderr F oops\n"} {
		if !strings.Contains(string(logData), want) {
			t.Errorf("container log %q lacks %q", logData, want)
		}
	}
	// Only the container's output: the runtime logs to its own file.
	if n := strings.Count(string(logData), "\n"); n != 2 {
		t.Errorf("container log has %d lines, want 2:\n%s", n, logData)
	}
	if _, err := os.Stat(filepath.Join(bundle, createLogFile)); err != nil {
		t.Errorf("runtime's create log: %v", err)
	}

	testbundle.CheckDelete(ctx, t, r, id)
	for _, name := range bundleLeftovers {
		if _, err := os.Lstat(filepath.Join(bundle, name)); err == nil {
			t.Errorf("%s left in the bundle", name)
		}
	}
	e.assertNoLeaks(id)
}

func TestIntegrationGracefulStop(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("graceful")
	// PID 1 of a pid namespace only gets signals it handles.
	bundle := e.bundle(id, nil, "sh", "-c", `trap "exit 7" TERM; sleep 100 & wait`)
	e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: bundle})
	if err := e.rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	st, err := e.rt.State(ctx, id)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	testbundle.WaitForChild(t, st.Pid, "sleep") // the trap is set
	start := time.Now()
	if err := e.rt.Stop(ctx, id, 30*time.Second, syscall.SIGTERM); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %v for a process that exits on SIGTERM", d)
	}
	if exit, ok, err := e.rt.Exited(id); err != nil || !ok || exit.Code != 7 {
		t.Fatalf("Exited = (%+v, %v, %v), want code 7", exit, ok, err)
	}
}

func TestIntegrationExitCode(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("exit3")
	bundle := e.bundle(id, nil, "sh", "-c", "sleep 0.2; exit 3")
	e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: bundle})

	waitCtx, waitCancel := context.WithTimeout(ctx, 30*time.Second)
	defer waitCancel()
	got := make(chan error, 1)
	go func() {
		exit, err := e.rt.Wait(waitCtx, id)
		if err == nil && exit.Code != 3 {
			err = fmt.Errorf("exit code %d, want 3", exit.Code)
		}
		got <- err
	}()
	if err := e.rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if st, err := e.rt.State(ctx, id); err != nil || st.Status != runtime.StatusStopped {
		t.Errorf("State = %+v, %v", st, err)
	}
	if err := e.rt.Stop(ctx, id, time.Second, 0); err != nil {
		t.Errorf("Stop of an exited container: %v", err)
	}
}

// writeWrapper writes a runtime wrapper that runs body for `create` and
// hands every other command to runc.
func (e *testEnv) writeWrapper(name, body string) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	script := `#!/bin/sh
for a in "$@"; do
	if [ "$a" = create ]; then
` + body + `
	fi
done
exec ` + runcPath + ` "$@"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		e.t.Fatal(err)
	}
	return path
}

func TestIntegrationCreateFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wrapper string // body run for create; "" means plain runc
		mutate  func(*specs.Spec)
		noSpec  bool
		timeout time.Duration
		wantErr string
	}{
		{
			name:    "missing executable",
			mutate:  func(s *specs.Spec) { s.Process.Args = []string{"/bin/nonexistent"} },
			wantErr: `stat /bin/nonexistent: no such file or directory`,
		},
		{
			name:    "no config.json",
			noSpec:  true,
			wantErr: "config.json",
		},
		{
			name:    "runtime fails",
			wrapper: `echo 'time="2026-01-01T00:00:00Z" level=error msg="injected create failure"' >&2; exit 1`,
			wantErr: "injected create failure",
		},
		{
			// As crun does: the error only in the --log file.
			name: "runtime fails in its log only",
			wrapper: `for l in "$@"; do case $l in --log=*) ` +
				`echo '{"level":"error","msg":"injected log-only failure","time":"2026-01-01T00:00:00Z"}' >"${l#--log=}";; esac; done; exit 1`,
			wantErr: "injected log-only failure",
		},
		{
			name:    "runtime fails silently",
			wrapper: `exit 1`,
			wantErr: "conmon exited without reporting",
		},
		{
			// The intermediate conmon has detached; the hung runtime runs
			// under the detached one, which must be killed with it.
			name:    "runtime hangs",
			wrapper: `exec ` + busyboxPath + ` sh -c 'while :; do sleep 1; done' "hang-$PODBAY_TEST_ID"`,
			timeout: 2 * time.Second,
			wantErr: "deadline exceeded",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ctx := newTestEnv(t, time.Minute)
			id := e.newID("fail")
			r := e.rt
			if tc.wrapper != "" {
				e.cfg.RuntimePath = e.writeWrapper("wrapper", tc.wrapper)
				r = e.newRuntime()
			}
			// The hang wrapper puts the ID on its command line so the leak
			// check can see it; conmon passes the daemon's environment on.
			t.Setenv("PODBAY_TEST_ID", id)
			bundle := e.bundle(id, tc.mutate, "sleep", "100")
			if tc.noSpec {
				os.Remove(filepath.Join(bundle, "config.json"))
			}
			logPath := filepath.Join(e.dir, id+".log")
			createCtx := ctx
			if tc.timeout > 0 {
				var c context.CancelFunc
				createCtx, c = context.WithTimeout(ctx, tc.timeout)
				defer c()
			}
			start := time.Now()
			_, err := r.Create(createCtx, runtime.CreateOptions{ID: id, BundleDir: bundle, LogPath: logPath})
			if err == nil {
				t.Fatal("Create succeeded")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Create error %q does not contain %q", err, tc.wantErr)
			}
			t.Logf("Create failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			// Nothing may be left, without any Delete.
			e.assertNoLeaks(id)
			if _, err := os.Stat(logPath); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("log file left: %v", err)
			}
			for _, name := range bundleLeftovers {
				if _, err := os.Lstat(filepath.Join(bundle, name)); err == nil {
					t.Errorf("%s left in the bundle", name)
				}
			}

			// The same ID works once the cause is gone.
			e.bundle(id+"-retry", nil, "sleep", "100")
			os.RemoveAll(bundle)
			if err := os.Rename(filepath.Join(e.dir, "bundles", id+"-retry"), bundle); err != nil {
				t.Fatal(err)
			}
			e.create(ctx, e.newRuntimeWithPath(runcPath), runtime.CreateOptions{ID: id, BundleDir: bundle, LogPath: logPath})
			if err := e.rt.Delete(ctx, id); err != nil {
				t.Fatalf("Delete after retry: %v", err)
			}
			e.assertNoLeaks(id)
		})
	}
}

func TestIntegrationLogDirMissing(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("nolog")
	bundle := e.bundle(id, nil, "sleep", "100")
	// conmon fails before it detaches; what it printed must reach the caller.
	_, err := e.rt.Create(ctx, runtime.CreateOptions{ID: id, BundleDir: bundle, LogPath: filepath.Join(e.dir, "missing", "0.log")})
	if err == nil || !strings.Contains(err.Error(), "Failed to open log file") {
		t.Fatalf("Create error = %v, want conmon's complaint about the log file", err)
	}
	e.assertNoLeaks(id)
}

func TestIntegrationTerminal(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("tty")
	logPath := filepath.Join(e.dir, id+".log")
	bundle := e.bundle(id, func(s *specs.Spec) {
		s.Process.Terminal = true
		// runc opens the console through /dev/ptmx, a link into devpts.
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: "/dev/pts", Type: "devpts", Source: "devpts",
			Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"},
		})
	}, "sh", "-c", "[ -t 1 ] && echo isatty")
	e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: bundle, LogPath: logPath, Terminal: true, Stdin: true})
	if err := e.rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	exit, err := e.rt.Wait(ctx, id)
	if err != nil || exit.Code != 0 {
		t.Fatalf("Wait = (%+v, %v), want code 0", exit, err)
	}
	if logData, _ := os.ReadFile(logPath); !strings.Contains(string(logData), " stdout F isatty") {
		t.Errorf("container log %q lacks the terminal check", logData)
	}
}

// TestIntegrationMonitorKilled shows what happens when conmon dies under a
// running container: the container keeps running, State reports no
// monitor, Stop still works, but no exit code is ever recorded.
func TestIntegrationMonitorKilled(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("orphan")
	e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: e.bundle(id, nil, "sleep", "100")})
	if err := e.rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	st, err := e.rt.State(ctx, id)
	if err != nil || st.MonitorPid == 0 {
		t.Fatalf("State = %+v, %v", st, err)
	}
	if err := syscall.Kill(st.MonitorPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(ctx, 5*time.Second, func() bool { return !isMonitorOf(st.MonitorPid, id) }) {
		t.Fatal("conmon survived SIGKILL")
	}
	after, err := e.rt.State(ctx, id)
	if err != nil || after.Status != runtime.StatusRunning || after.MonitorPid != 0 || after.Pid != st.Pid {
		t.Fatalf("State after conmon died = %+v, %v", after, err)
	}
	if err := e.rt.Stop(ctx, id, 0, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st, err := e.rt.State(ctx, id); err != nil || st.Status != runtime.StatusStopped {
		t.Errorf("State after Stop = %+v, %v", st, err)
	}
	if _, ok, err := e.rt.Exited(id); ok || err != nil {
		t.Errorf("Exited without conmon = %v, %v; want no exit file", ok, err)
	}
}

func (e *testEnv) newRuntimeWithPath(path string) *Runtime {
	e.cfg.RuntimePath = path
	return e.newRuntime()
}

func TestIntegrationOOMScoreAdjRestricted(t *testing.T) {
	// This host lacks CAP_SYS_RESOURCE; the runtime's complaint must reach
	// the caller. Elsewhere the create succeeds, which is fine too.
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("oom")
	adj := -998
	bundle := e.bundle(id, func(s *specs.Spec) { s.Process.OOMScoreAdj = &adj }, "sleep", "100")
	_, err := e.rt.Create(ctx, runtime.CreateOptions{ID: id, BundleDir: bundle})
	if err == nil {
		t.Log("oom_score_adj -998 allowed on this host")
		return
	}
	if !strings.Contains(err.Error(), "oom_score_adj") {
		t.Fatalf("Create error %q does not mention oom_score_adj", err)
	}
	e.assertNoLeaks(id)
}

func TestIntegrationCreateExistingID(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("dup")
	bundle := e.bundle(id, nil, "sleep", "100")
	pid := e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: bundle})
	if _, err := e.rt.Create(ctx, runtime.CreateOptions{ID: id, BundleDir: bundle}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second Create = %v, want ErrAlreadyExists", err)
	}
	// The failed second Create must not have rolled back the first.
	if st, err := e.rt.State(ctx, id); err != nil || st.Status != runtime.StatusCreated || st.Pid != pid || st.MonitorPid == 0 {
		t.Fatalf("State after duplicate Create = %+v, %v", st, err)
	}
	// Stop of a created (never started) container.
	if err := e.rt.Stop(ctx, id, 0, 0); err != nil {
		t.Fatalf("Stop of a created container: %v", err)
	}
	if exit, ok, err := e.rt.Exited(id); err != nil || !ok || exit.Code != 137 {
		t.Errorf("Exited after Stop = (%+v, %v, %v), want 137", exit, ok, err)
	}
}

func TestIntegrationUnknownID(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	id := e.newID("ghost")
	if _, err := e.rt.State(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("State = %v, want ErrNotFound", err)
	}
	if err := e.rt.Kill(ctx, id, syscall.SIGTERM, false); !errdefs.IsNotFound(err) {
		t.Errorf("Kill = %v, want ErrNotFound", err)
	}
	if err := e.rt.Start(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Start = %v, want ErrNotFound", err)
	}
	if list, err := e.rt.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List = %+v, %v; want none", list, err)
	}
	for range 2 {
		if err := e.rt.Stop(ctx, id, time.Second, 0); err != nil {
			t.Errorf("Stop = %v, want nil", err)
		}
		if err := e.rt.Delete(ctx, id); err != nil {
			t.Errorf("Delete = %v, want nil", err)
		}
	}
	if _, ok, err := e.rt.Exited(id); ok || err != nil {
		t.Errorf("Exited = %v, %v", ok, err)
	}
	short, c := context.WithTimeout(ctx, 100*time.Millisecond)
	defer c()
	if _, err := e.rt.Wait(short, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want DeadlineExceeded", err)
	}
}

// TestIntegrationDaemonRestart stands for podbayd being killed and
// restarted: the first Runtime is dropped while its containers run, one
// container exits while no Runtime exists, and a second Runtime on the same
// directories takes over.
func TestIntegrationDaemonRestart(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)

	first, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	long := e.newID("long")
	short := e.newID("short")
	e.create(ctx, first, runtime.CreateOptions{ID: long, BundleDir: e.bundle(long, nil, "sh", "-c", `trap "exit 5" TERM; sleep 100 & wait`)})
	e.create(ctx, first, runtime.CreateOptions{ID: short, BundleDir: e.bundle(short, nil, "sh", "-c", "sleep 0.5; exit 4")})
	for _, id := range []string{long, short} {
		if err := first.Start(ctx, id); err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
	}
	before, err := first.State(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	// "Daemon down": the short container exits; only conmon sees it.
	if !waitUntil(ctx, 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(e.cfg.ExitDir, short))
		return err == nil
	}) {
		t.Fatal("no exit file while the daemon was down")
	}

	second := e.newRuntime()
	list, err := second.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	listed := make(map[string]runtime.State)
	for _, st := range list {
		listed[st.ID] = st
	}
	if len(listed) != 2 || listed[long].Status != runtime.StatusRunning || listed[long].MonitorPid != before.MonitorPid || listed[short].Status != runtime.StatusStopped {
		t.Errorf("List after restart = %+v", list)
	}
	exit, ok, err := second.Exited(short)
	if err != nil || !ok || exit.Code != 4 {
		t.Fatalf("Exited after restart = (%+v, %v, %v), want 4", exit, ok, err)
	}
	if w, err := second.Wait(ctx, short); err != nil || w.Code != 4 {
		t.Fatalf("Wait after restart = (%+v, %v)", w, err)
	}
	st, err := second.State(ctx, long)
	if err != nil || st.Status != runtime.StatusRunning || st.Pid != before.Pid || st.MonitorPid != before.MonitorPid || st.MonitorPid == 0 {
		t.Fatalf("State after restart = %+v, %v; before %+v", st, err, before)
	}
	waited := make(chan runtime.ExitStatus, 1)
	go func() {
		w, _ := second.Wait(ctx, long)
		waited <- w
	}()
	if err := second.Stop(ctx, long, 10*time.Second, 0); err != nil {
		t.Fatalf("Stop after restart: %v", err)
	}
	if w := <-waited; w.Code != 5 {
		t.Errorf("Wait after restart = %+v, want code 5", w)
	}
	for _, id := range []string{long, short} {
		if err := second.Delete(ctx, id); err != nil {
			t.Errorf("Delete %s after restart: %v", id, err)
		}
	}
	e.assertNoLeaks(long, short)
}

// procStat returns the parent pid and process group of pid.
func procStat(t *testing.T, pid int) (ppid, pgid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid pgrp ...
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	ppid, _ = strconv.Atoi(f[1])
	pgid, _ = strconv.Atoi(f[2])
	return ppid, pgid
}
