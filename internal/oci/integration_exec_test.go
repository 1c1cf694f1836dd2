package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// startContainer creates and starts a container running args and returns
// its ID and bundle.
func (e *testEnv) startContainer(ctx context.Context, name string, opts runtime.CreateOptions, mutate func(*specs.Spec), args ...string) (string, string) {
	e.t.Helper()
	id := e.newID(name)
	bundle := e.bundle(id, mutate, args...)
	opts.ID, opts.BundleDir = id, bundle
	e.create(ctx, e.rt, opts)
	if err := e.rt.Start(ctx, id); err != nil {
		e.t.Fatalf("Start %s: %v", id, err)
	}
	return id, bundle
}

// containerCmdlines returns the command lines of the processes in the
// container's memory cgroup.
func containerCmdlines(t *testing.T, id string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", testCgroupParent, id, "cgroup.procs"))
	if err != nil {
		t.Fatalf("container processes: %v", err)
	}
	var cmdlines []string
	for _, f := range strings.Fields(string(b)) {
		c, err := os.ReadFile("/proc/" + f + "/cmdline")
		if err != nil {
			continue // exited meanwhile
		}
		cmdlines = append(cmdlines, strings.TrimSpace(strings.ReplaceAll(string(c), "\x00", " ")))
	}
	return cmdlines
}

// runtimeExecs lists the runtime exec processes for container id.
func runtimeExecs(id string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		c, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		args := strings.Split(string(c), "\x00")
		if slices.Contains(args, "exec") && slices.Contains(args, id) {
			found = append(found, ent.Name()+":"+strings.Join(args, " "))
		}
	}
	return found
}

// assertExecGone checks that no runtime exec for id is left and that the
// container holds only processes whose command lines are in want.
func assertExecGone(t *testing.T, id string, want ...string) {
	t.Helper()
	var execs, procs []string
	waitUntil(context.Background(), 5*time.Second, func() bool {
		execs, procs = runtimeExecs(id), containerCmdlines(t, id)
		return len(execs) == 0 && slices.Equal(procs, want)
	})
	if len(execs) > 0 {
		t.Errorf("runtime exec processes left: %q", execs)
	}
	if !slices.Equal(procs, want) {
		t.Errorf("container processes = %q, want %q", procs, want)
	}
}

func TestIntegrationExecSync(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)
	caps := []string{"CAP_CHOWN", "CAP_KILL", "CAP_SETUID", "CAP_SETGID"}
	id, bundle := e.startContainer(ctx, "exec", runtime.CreateOptions{}, func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, "FOO=container", "KEEP=kept")
		s.Process.Cwd = "/tmp"
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	}, "sleep", "1000")
	st, err := e.rt.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name       string
		opts       runtime.ExecOptions
		wantOut    string
		wantErr    string
		wantCode   int32
		wantStatus string // a line /proc/self/status must have, from a grep
	}{
		{name: "stdout and stderr", opts: runtime.ExecOptions{Args: []string{"sh", "-c", "echo out; echo err >&2"}}, wantOut: "out\n", wantErr: "err\n"},
		{name: "true", opts: runtime.ExecOptions{Args: []string{"true"}}},
		{name: "exit 3", opts: runtime.ExecOptions{Args: []string{"sh", "-c", "echo before; exit 3"}}, wantOut: "before\n", wantCode: 3},
		{name: "killed", opts: runtime.ExecOptions{Args: []string{"sh", "-c", "kill -9 $$"}}, wantCode: 128 + 9},
		{name: "container env and cwd", opts: runtime.ExecOptions{Args: []string{"sh", "-c", `echo "$FOO $KEEP $PATH $(pwd)"`}}, wantOut: "container kept /bin /tmp\n"},
		{
			name:    "env and cwd overridden",
			opts:    runtime.ExecOptions{Args: []string{"sh", "-c", `echo "$FOO $KEEP $NEW $(pwd)"`}, Env: []string{"FOO=exec", "NEW=new"}, Cwd: "/bin"},
			wantOut: "exec kept new /bin\n",
		},
		{name: "container user", opts: runtime.ExecOptions{Args: []string{"id"}}, wantOut: "uid=0 gid=0"},
		{
			name:    "custom user",
			opts:    runtime.ExecOptions{Args: []string{"id"}, User: &specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{1002}}},
			wantOut: "uid=1000 gid=1001 groups=1002\n",
		},
		{name: "capabilities", opts: runtime.ExecOptions{Args: []string{"cat", "/proc/self/status"}}, wantStatus: "CapEff:\t" + statusField(t, st.Pid, "CapEff")},
		{name: "no new privileges", opts: runtime.ExecOptions{Args: []string{"cat", "/proc/self/status"}}, wantStatus: "NoNewPrivs:\t1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.rt.ExecSync(ctx, id, tc.opts)
			if err != nil {
				t.Fatalf("ExecSync: %v", err)
			}
			if res.ExitCode != tc.wantCode || res.TimedOut {
				t.Errorf("exit code %d, timed out %v; want %d (stdout %q, stderr %q)", res.ExitCode, res.TimedOut, tc.wantCode, res.Stdout, res.Stderr)
			}
			if tc.wantStatus != "" {
				if !strings.Contains(string(res.Stdout), tc.wantStatus+"\n") {
					t.Errorf("/proc/self/status lacks %q:\n%s", tc.wantStatus, res.Stdout)
				}
				return
			}
			if !strings.HasPrefix(string(res.Stdout), tc.wantOut) || (tc.wantOut == "" && len(res.Stdout) > 0) {
				t.Errorf("stdout %q, want %q", res.Stdout, tc.wantOut)
			}
			if string(res.Stderr) != tc.wantErr {
				t.Errorf("stderr %q, want %q", res.Stderr, tc.wantErr)
			}
		})
	}

	t.Run("missing command", func(t *testing.T) {
		_, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"nonexistent"}})
		if err == nil || !strings.Contains(err.Error(), "executable file not found") {
			t.Fatalf("ExecSync = %v, want the runtime's complaint", err)
		}
		if errdefs.IsNotFound(err) || errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("error %v misclassified", err)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		for _, opts := range []runtime.ExecOptions{{}, {Args: []string{"true"}, Cwd: "tmp"}, {Args: []string{"true"}, Timeout: -1}, {Args: []string{"true"}, Env: []string{"=x"}}} {
			if _, err := e.rt.ExecSync(ctx, id, opts); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ExecSync(%+v) = %v, want ErrInvalidArgument", opts, err)
			}
		}
	})
	t.Run("output cap", func(t *testing.T) {
		n := runtime.MaxExecOutput + 1000
		res, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"sh", "-c", fmt.Sprintf("busybox head -c %d /dev/zero; echo small >&2", n)}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("ExecSync = %+v, %v", res.ExitCode, err)
		}
		if len(res.Stdout) != runtime.MaxExecOutput-runtime.ExecOutputReserve || !res.StdoutTruncated || string(res.Stderr) != "small\n" || res.StderrTruncated {
			t.Errorf("stdout %d bytes (truncated %v), stderr %q (truncated %v)", len(res.Stdout), res.StdoutTruncated, res.Stderr, res.StderrTruncated)
		}
	})
	t.Run("detached child", func(t *testing.T) {
		// A child in a session of its own, not holding the output, is the
		// container's: the call returns, and the child stays.
		start := time.Now()
		res, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"sh", "-c", "busybox setsid sleep 30 >/dev/null 2>&1 </dev/null & echo started"}, Timeout: 10 * time.Second})
		if err != nil || res.ExitCode != 0 || res.TimedOut || string(res.Stdout) != "started\n" {
			t.Fatalf("ExecSync = %+v, %v", res, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("ExecSync took %v with a detached child", d)
		}
	})
	t.Run("background child holds stdout", func(t *testing.T) {
		// The output stays open, so the exec is not done until the
		// timeout, which kills the child with the process group.
		res, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"sh", "-c", "sleep 20 & echo started"}, Timeout: 500 * time.Millisecond})
		if err != nil || !res.TimedOut || res.ExitCode != -1 || string(res.Stdout) != "started\n" {
			t.Fatalf("ExecSync = %+v, %v", res, err)
		}
	})

	// Nothing of the execs is left: no runtime process, no temporary
	// directory in the bundle. The detached sleep is the container's now;
	// it goes with the container.
	assertExecGone(t, id, "sleep 1000", "sleep 30")
	if left, _ := filepath.Glob(filepath.Join(bundle, ".exec-*")); len(left) > 0 {
		t.Errorf("exec directories left in the bundle: %q", left)
	}
}

// statusField returns a field of /proc/<pid>/status.
func statusField(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return ""
}

func TestIntegrationExecSyncTimeout(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)
	id, _ := e.startContainer(ctx, "exectimeout", runtime.CreateOptions{}, nil, "sleep", "1000")

	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "process", args: []string{"sleep", "10"}},
		// The shell forks sleep; killing the shell alone would leave it.
		{name: "process group", args: []string{"sh", "-c", "echo started; sleep 10; echo never"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 500 * time.Millisecond
			start := time.Now()
			res, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{Args: tc.args, Timeout: timeout})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("ExecSync: %v", err)
			}
			if !res.TimedOut || res.ExitCode != -1 {
				t.Errorf("result %+v, want timed out with exit code -1", res)
			}
			if took < timeout || took > timeout+3*time.Second {
				t.Errorf("ExecSync took %v with a %v timeout", took, timeout)
			}
			if tc.name == "process group" && string(res.Stdout) != "started\n" {
				t.Errorf("stdout %q, want what was written before the timeout", res.Stdout)
			}
			t.Logf("timed out after %v", took.Round(time.Millisecond))
			assertExecGone(t, id, "sleep 1000")
			pids, err := e.rt.Pids(ctx, id)
			if st, _ := e.rt.State(ctx, id); err != nil || !slices.Equal(pids, []int{st.Pid}) {
				t.Errorf("Pids = %v, %v; want only init %d", pids, err, st.Pid)
			}
		})
	}

	t.Run("cancelled", func(t *testing.T) {
		short, c := context.WithTimeout(ctx, 300*time.Millisecond)
		defer c()
		_, err := e.rt.ExecSync(short, id, runtime.ExecOptions{Args: []string{"sleep", "10"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ExecSync = %v, want DeadlineExceeded", err)
		}
		assertExecGone(t, id, "sleep 1000")
	})
}

func TestIntegrationExecSyncConcurrent(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)
	id, _ := e.startContainer(ctx, "execmany", runtime.CreateOptions{}, nil, "sleep", "1000")

	// Latency of the cheapest probe, one at a time.
	const rounds = 20
	var durations []time.Duration
	for range rounds {
		start := time.Now()
		res, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("ExecSync true = %+v, %v", res, err)
		}
		durations = append(durations, time.Since(start))
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	t.Logf("ExecSync true: median %v, max %v over %d runs", durations[rounds/2].Round(100*time.Microsecond), durations[rounds-1].Round(100*time.Microsecond), rounds)

	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.rt.ExecSync(ctx, id, runtime.ExecOptions{
				Args: []string{"sh", "-c", `echo "out $1"; echo "err $1" >&2; exit $(($1 % 4))`, "sh", strconv.Itoa(i)},
			})
			switch {
			case err != nil:
				errs <- fmt.Errorf("exec %d: %w", i, err)
			case string(res.Stdout) != fmt.Sprintf("out %d\n", i) || string(res.Stderr) != fmt.Sprintf("err %d\n", i) || res.ExitCode != int32(i%4):
				errs <- fmt.Errorf("exec %d: %+v", i, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent ExecSyncs took %v", n, time.Since(start).Round(time.Millisecond))
	assertExecGone(t, id, "sleep 1000")
}

func TestIntegrationExecSyncNotRunning(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)

	created := e.newID("execcreated")
	e.create(ctx, e.rt, runtime.CreateOptions{ID: created, BundleDir: e.bundle(created, nil, "sleep", "1000")})
	if _, err := e.rt.ExecSync(ctx, created, runtime.ExecOptions{Args: []string{"true"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ExecSync in a created container = %v, want ErrFailedPrecondition", err)
	}

	stopped, _ := e.startContainer(ctx, "execstopped", runtime.CreateOptions{}, nil, "sh", "-c", "exit 0")
	if _, err := e.rt.Wait(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.ExecSync(ctx, stopped, runtime.ExecOptions{Args: []string{"true"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ExecSync in a stopped container = %v, want ErrFailedPrecondition", err)
	}
	if pids, err := e.rt.Pids(ctx, stopped); err != nil || len(pids) != 0 {
		t.Errorf("Pids of a stopped container = %v, %v", pids, err)
	}

	ghost := e.newID("execghost")
	if _, err := e.rt.ExecSync(ctx, ghost, runtime.ExecOptions{Args: []string{"true"}}); !errdefs.IsNotFound(err) {
		t.Errorf("ExecSync with an unknown ID = %v, want ErrNotFound", err)
	}
	if _, err := e.rt.Pids(ctx, ghost); !errdefs.IsNotFound(err) {
		t.Errorf("Pids with an unknown ID = %v, want ErrNotFound", err)
	}
}

func TestIntegrationUpdate(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	pids := int64(100)
	id, bundle := e.startContainer(ctx, "update", runtime.CreateOptions{}, func(s *specs.Spec) {
		s.Linux.Resources = &specs.LinuxResources{
			Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}},
			Pids:    &specs.LinuxPids{Limit: &pids},
		}
	}, "sleep", "1000")
	cgroupFile := func(controller, file string) string {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, testCgroupParent, id, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	limit, shares := int64(64<<20), uint64(512)
	if err := e.rt.Update(ctx, id, &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &limit},
		CPU:    &specs.LinuxCPU{Shares: &shares},
	}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := cgroupFile("memory", "memory.limit_in_bytes"); got != strconv.FormatInt(limit, 10) {
		t.Errorf("memory.limit_in_bytes = %s, want %d", got, limit)
	}
	if got := cgroupFile("cpu", "cpu.shares"); got != "512" {
		t.Errorf("cpu.shares = %s, want 512", got)
	}
	spec, err := runtime.ReadSpec(bundle)
	if err != nil {
		t.Fatal(err)
	}
	res := spec.Linux.Resources
	if res.Memory == nil || res.Memory.Limit == nil || *res.Memory.Limit != limit || res.CPU == nil || res.CPU.Shares == nil || *res.CPU.Shares != shares {
		t.Errorf("config.json resources after Update = %+v", res)
	}
	if res.Pids == nil || res.Pids.Limit == nil || *res.Pids.Limit != pids || len(res.Devices) != 1 {
		t.Errorf("Update lost resources it was not given: %+v", res)
	}

	// A limit below the current usage is refused; config.json keeps the
	// last good value.
	tiny := int64(4096)
	if err := e.rt.Update(ctx, id, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &tiny}}); err == nil {
		t.Error("Update to 4 KiB succeeded")
	} else {
		t.Logf("Update to 4 KiB: %v", err)
	}
	if spec, err := runtime.ReadSpec(bundle); err != nil || *spec.Linux.Resources.Memory.Limit != limit {
		t.Errorf("config.json changed by a refused update: %v", err)
	}
	if got := cgroupFile("memory", "memory.limit_in_bytes"); got != strconv.FormatInt(limit, 10) {
		t.Errorf("memory.limit_in_bytes = %s after a refused update, want %d", got, limit)
	}

	if err := e.rt.Update(ctx, id, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Update(nil) = %v, want ErrInvalidArgument", err)
	}
	if err := e.rt.Stop(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Update(ctx, id, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Update of a stopped container = %v, want ErrFailedPrecondition", err)
	}
	if err := e.rt.Update(ctx, e.newID("ghost"), &specs.LinuxResources{}); !errdefs.IsNotFound(err) {
		t.Errorf("Update of an unknown ID = %v, want ErrNotFound", err)
	}
}

func TestIntegrationReopenLog(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	logDir := filepath.Join(e.dir, "logs")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, "0.log")
	id, _ := e.startContainer(ctx, "reopen", runtime.CreateOptions{LogPath: logPath}, nil,
		"sh", "-c", `i=0; while :; do echo "line $i"; i=$((i+1)); sleep 0.1; done`)
	hasLine := func(path string) func() bool {
		return func() bool {
			b, _ := os.ReadFile(path)
			return bytes.Contains(b, []byte(" stdout F line "))
		}
	}
	if !waitUntil(ctx, 10*time.Second, hasLine(logPath)) {
		t.Fatal("no line in the log")
	}

	// The kubelet's rotation: rename, then ask for a new file.
	rotated := logPath + ".20260101-000000"
	if err := os.Rename(logPath, rotated); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.rt.ReopenLog(ctx, id); err != nil {
		t.Fatalf("ReopenLog: %v", err)
	}
	t.Logf("ReopenLog took %v", time.Since(start).Round(100*time.Microsecond))
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("no log file when ReopenLog returned: %v", err)
	}
	if !waitUntil(ctx, 10*time.Second, hasLine(logPath)) {
		t.Fatal("no line in the reopened log")
	}
	// The rotated file gets nothing more.
	old, _ := os.ReadFile(rotated)
	time.Sleep(300 * time.Millisecond)
	if again, _ := os.ReadFile(rotated); !bytes.Equal(old, again) {
		t.Error("the rotated file is still written to")
	}

	// Without a rename conmon still starts a new file.
	if err := e.rt.ReopenLog(ctx, id); err != nil {
		t.Fatalf("ReopenLog without rotation: %v", err)
	}

	// A log directory that is gone would make conmon exit.
	if err := os.Rename(logDir, logDir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.ReopenLog(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ReopenLog without the log directory = %v, want ErrFailedPrecondition", err)
	}
	if st, err := e.rt.State(ctx, id); err != nil || st.MonitorPid == 0 {
		t.Errorf("conmon gone after ReopenLog without the log directory: %+v, %v", st, err)
	}
	if err := os.Rename(logDir+".moved", logDir); err != nil {
		t.Fatal(err)
	}

	if err := e.rt.Stop(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(logPath); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.ReopenLog(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ReopenLog of a stopped container = %v, want ErrFailedPrecondition", err)
	}
	if _, err := os.Stat(logPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReopenLog of a stopped container created the log file: %v", err)
	}
	if err := e.rt.ReopenLog(ctx, e.newID("ghost")); !errdefs.IsNotFound(err) {
		t.Errorf("ReopenLog of an unknown ID = %v, want ErrNotFound", err)
	}

	// No log file: nothing to reopen.
	nolog, _ := e.startContainer(ctx, "nolog", runtime.CreateOptions{}, nil, "sleep", "1000")
	if err := e.rt.ReopenLog(ctx, nolog); err != nil {
		t.Errorf("ReopenLog without a log file = %v", err)
	}
}
