package shim

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
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

func TestIntegrationExecSync(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	id, _ := e.run(ctx, r, pod, "exec", nil, "sleep", "100")

	res, err := r.ExecSync(ctx, id, runtime.ExecOptions{
		Args: []string{"sh", "-c", `echo $GREETING $EXTRA; echo err >&2; exit 5`},
		Env:  []string{"EXTRA=world"},
	})
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if string(res.Stdout) != "hello world\n" || string(res.Stderr) != "err\n" || res.ExitCode != 5 || res.TimedOut {
		t.Errorf("ExecSync = %+v (stdout %q, stderr %q)", res, res.Stdout, res.Stderr)
	}

	start := time.Now()
	res, err = r.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"sh", "-c", "echo early; exec sleep 10"}, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("ExecSync with timeout: %v", err)
	}
	if !res.TimedOut || res.ExitCode != -1 || string(res.Stdout) != "early\n" {
		t.Errorf("timed-out ExecSync = %+v (stdout %q)", res, res.Stdout)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timed-out ExecSync took %v", d)
	}

	res, err = r.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"dd", "if=/dev/zero", "bs=1M", "count=20"}})
	if err != nil {
		t.Fatalf("ExecSync with a lot of output: %v", err)
	}
	if len(res.Stdout) != runtime.MaxExecOutput-runtime.ExecOutputReserve || !res.StdoutTruncated || res.ExitCode != 0 {
		t.Errorf("ExecSync of 20 MiB: %d bytes, truncated %v, code %d", len(res.Stdout), res.StdoutTruncated, res.ExitCode)
	}

	if _, err := r.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"/bin/nonexistent"}}); err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("ExecSync of a missing binary = %v", err)
	}
	if _, err := r.ExecSync(ctx, id, runtime.ExecOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ExecSync without a command = %v, want ErrInvalidArgument", err)
	}
	// Each exec removes its FIFOs.
	entries, _ := os.ReadDir(r.containerDir(id))
	for _, ent := range entries {
		if strings.HasPrefix(ent.Name(), "exec-") {
			t.Errorf("exec state left: %s", ent.Name())
		}
	}

	if err := r.Stop(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"true"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ExecSync in a stopped container = %v, want ErrFailedPrecondition", err)
	}
}

func TestIntegrationExecStream(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	id, _ := e.run(ctx, r, pod, "exec", nil, "sleep", "1000")

	var out, errOut testbundle.Buffer
	code, err := r.Exec(ctx, id, runtime.ExecStreamOptions{
		Args:   []string{"sh", "-c", "cat; echo done >&2; exit 4"},
		Stdin:  strings.NewReader("from stdin\n"),
		Stdout: &out, Stderr: &errOut,
	})
	if err != nil || code != 4 || out.String() != "from stdin\n" || errOut.String() != "done\n" {
		t.Errorf("Exec with stdin = %d, %v; stdout %q, stderr %q", code, err, out.String(), errOut.String())
	}

	// A terminal, sized from the start.
	resize := make(chan runtime.Size, 1)
	resize <- runtime.Size{Width: 100, Height: 40}
	var tty testbundle.Buffer
	code, err = r.Exec(ctx, id, runtime.ExecStreamOptions{Args: []string{"stty", "size"}, Tty: true, Stdout: &tty, Resize: resize})
	if err != nil || code != 0 || !strings.Contains(tty.String(), "40 100") {
		t.Errorf("Exec with a terminal = %d, %v; output %q", code, err, tty.String())
	}

	// An interactive shell on a terminal.
	inR, inW := io.Pipe()
	var shell testbundle.Buffer
	done := make(chan error, 1)
	go func() {
		code, err := r.Exec(ctx, id, runtime.ExecStreamOptions{Args: []string{"sh"}, Tty: true, Stdin: inR, Stdout: &shell})
		if err == nil && code != 3 {
			err = errors.New("exit code " + strconv.Itoa(int(code)))
		}
		done <- err
	}()
	if _, err := inW.Write([]byte("echo $((6*7)); exit 3\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || !strings.Contains(shell.String(), "42") {
		t.Errorf("interactive Exec: %v; output %q", err, shell.String())
	}
	inW.Close()

	// The caller going away kills the process.
	short, c := context.WithTimeout(ctx, 300*time.Millisecond)
	defer c()
	start := time.Now()
	if _, err := r.Exec(short, id, runtime.ExecStreamOptions{Args: []string{"sleep", "100"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled Exec = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled Exec took %v", d)
	}
	if !testbundle.WaitFor(5*time.Second, func() bool {
		for _, p := range testbundle.ProcessesOf(id) {
			if strings.HasSuffix(p, ":sleep 100 ") {
				return false
			}
		}
		return true
	}) {
		t.Errorf("cancelled exec still runs: %q", testbundle.ProcessesOf(id))
	}
}

func TestIntegrationAttach(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")

	// StdinOnce: the end of the client's input closes the container's
	// stdin; the attach lasts until the container exits.
	once, opts := e.newContainer(pod, "once", nil, "sh", "-c", "while read line; do echo got:$line; done; echo eof")
	opts.Stdin, opts.StdinOnce = true, true
	e.create(ctx, r, opts)
	if err := r.Start(ctx, once); err != nil {
		t.Fatal(err)
	}
	var out testbundle.Buffer
	if err := r.Attach(ctx, once, runtime.AttachOptions{Stdin: strings.NewReader("ping\n"), Stdout: &out, Stderr: &out, StdinOnce: true}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := out.String(); got != "got:ping\neof\n" {
		t.Errorf("attached output %q", got)
	}
	if exit, err := r.Wait(ctx, once); err != nil || exit.Code != 0 {
		t.Errorf("Wait = %+v, %v", exit, err)
	}
	if logData := readFile(t, opts.LogPath); !strings.Contains(logData, " stdout F got:ping\n") {
		t.Errorf("log %q", logData)
	}
	if err := r.Attach(ctx, once, runtime.AttachOptions{Stdout: &out}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Attach to a stopped container = %v, want ErrFailedPrecondition", err)
	}

	// Without StdinOnce the end of the input detaches; the container
	// keeps its stdin for the next client.
	keep, opts := e.newContainer(pod, "keep", nil, "sh", "-c", "while read line; do echo got:$line; done")
	opts.Stdin = true
	e.create(ctx, r, opts)
	if err := r.Start(ctx, keep); err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"one", "two"} {
		if err := r.Attach(ctx, keep, runtime.AttachOptions{Stdin: strings.NewReader(word + "\n")}); err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	if !testbundle.WaitFor(5*time.Second, func() bool { return strings.Contains(readFile(t, opts.LogPath), "got:two") }) {
		t.Errorf("log %q lacks both inputs", readFile(t, opts.LogPath))
	}
	if st, err := r.State(ctx, keep); err != nil || st.Status != runtime.StatusRunning {
		t.Errorf("container after detach: %+v, %v", st, err)
	}
	// ctx ends an attach.
	short, c := context.WithTimeout(ctx, 200*time.Millisecond)
	defer c()
	if err := r.Attach(short, keep, runtime.AttachOptions{Stdout: io.Discard}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Attach until ctx ends = %v", err)
	}

	// A terminal: resized through the shim.
	term, opts := e.newContainer(pod, "tty", func(s *specs.Spec) { s.Process.Terminal = true }, "sh", "-c", "sleep 1; stty size")
	opts.Terminal = true
	e.create(ctx, r, opts)
	if err := r.Start(ctx, term); err != nil {
		t.Fatal(err)
	}
	resize := make(chan runtime.Size, 1)
	resize <- runtime.Size{Width: 5000, Height: 30} // clamped to 1000
	var ttyOut testbundle.Buffer
	if err := r.Attach(ctx, term, runtime.AttachOptions{Stdout: &ttyOut, Tty: true, Resize: resize}); err != nil {
		t.Fatalf("Attach with a terminal: %v", err)
	}
	if !strings.Contains(ttyOut.String(), "30 1000") {
		t.Errorf("terminal output %q, want size 30 1000", ttyOut.String())
	}
	if logData := readFile(t, opts.LogPath); !strings.Contains(logData, " stdout ") || strings.Contains(logData, " stderr ") {
		t.Errorf("terminal log %q", logData)
	}
}

func TestIntegrationUpdate(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	id, opts := e.run(ctx, r, pod, "update", nil, "sleep", "100")

	limit := int64(64 << 20)
	if err := r.Update(ctx, id, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	spec, err := runtime.ReadSpec(opts.BundleDir)
	if err != nil || spec.Linux.Resources == nil || spec.Linux.Resources.Memory == nil || *spec.Linux.Resources.Memory.Limit != limit {
		t.Errorf("config.json after Update: %+v, %v", spec.Linux.Resources, err)
	}
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", testCgroupParent, id, "memory.limit_in_bytes")); err == nil {
		if got := strings.TrimSpace(string(b)); got != strconv.FormatInt(limit, 10) {
			t.Errorf("cgroup memory limit %s, want %d", got, limit)
		}
	}
	// The shim reports the task's cgroup statistics.
	stats, err := r.TaskStats(ctx, id)
	if err != nil || stats.Memory.Limit != uint64(limit) || stats.Memory.Usage == 0 || stats.Pids.Current == 0 {
		t.Errorf("TaskStats = %+v, %v", stats, err)
	}
	if stats != nil && stats.MemoryDetail.MaxUsage < stats.Memory.Usage {
		t.Errorf("TaskStats peak memory %d below usage %d", stats.MemoryDetail.MaxUsage, stats.Memory.Usage)
	}
	// And its processes: the one sleep.
	if pids, err := r.TaskPids(ctx, id); err != nil || len(pids) != 1 || pids[0] <= 0 {
		t.Errorf("TaskPids = %v, %v; want the sleep", pids, err)
	}
	if _, err := r.TaskPids(ctx, "unknown"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TaskPids of an unknown container = %v, want ErrNotFound", err)
	}
	if err := r.Update(ctx, id, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Update without resources = %v", err)
	}
	if err := r.Stop(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Update(ctx, id, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Update of a stopped container = %v, want ErrFailedPrecondition", err)
	}
}

var tickPattern = regexp.MustCompile(` stdout F tick (\d+)\n`)

// ticks returns the numbers of the "tick N" lines in a log.
func ticks(log string) []int {
	var n []int
	for _, m := range tickPattern.FindAllStringSubmatch(log, -1) {
		i, _ := strconv.Atoi(m[1])
		n = append(n, i)
	}
	return n
}

// checkConsecutive reports a gap or a repeat in ticks.
func checkConsecutive(t *testing.T, ticks []int) {
	t.Helper()
	for i := 1; i < len(ticks); i++ {
		if ticks[i] != ticks[i-1]+1 {
			t.Errorf("ticks %d then %d: output lost or repeated", ticks[i-1], ticks[i])
			return
		}
	}
}

const tickScript = `i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.02; done`

func TestIntegrationReopenLog(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	id, opts := e.run(ctx, r, pod, "ticker", nil, "sh", "-c", tickScript)

	testbundle.WaitFor(5*time.Second, func() bool { return len(ticks(readFile(t, opts.LogPath))) >= 5 })
	rotated := opts.LogPath + ".1"
	if err := os.Rename(opts.LogPath, rotated); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenLog(ctx, id); err != nil {
		t.Fatalf("ReopenLog: %v", err)
	}
	if !testbundle.WaitFor(5*time.Second, func() bool {
		b, _ := os.ReadFile(opts.LogPath)
		return len(ticks(string(b))) >= 5
	}) {
		t.Fatal("no output in the reopened log")
	}
	if err := r.Stop(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	all := append(ticks(readFile(t, rotated)), ticks(readFile(t, opts.LogPath))...)
	checkConsecutive(t, all)

	// A log directory that is gone: the reopen fails, the log goes on.
	id2, opts2 := e.newContainer(pod, "gone", nil, "sleep", "100")
	opts2.LogPath = filepath.Join(e.dir, "logs", id2+".log")
	if err := os.MkdirAll(filepath.Dir(opts2.LogPath), 0o755); err != nil {
		t.Fatal(err)
	}
	e.create(ctx, r, opts2)
	if err := os.RemoveAll(filepath.Dir(opts2.LogPath)); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenLog(ctx, id2); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ReopenLog into a removed directory = %v, want ErrFailedPrecondition", err)
	}
}

func TestIntegrationOOM(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	limit := int64(16 << 20)
	_, memsw := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	id, opts := e.run(ctx, r, pod, "oom", func(s *specs.Spec) {
		mem := &specs.LinuxMemory{Limit: &limit}
		if memsw == nil {
			mem.Swap = &limit
		}
		s.Linux.Resources = &specs.LinuxResources{Memory: mem}
	}, "sh", "-c", "sleep 0.3; dd if=/dev/zero of=/dev/null bs=64M count=1")
	exit, err := r.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 137 {
		t.Skipf("the container was not OOM-killed (exit %d): no memory limit on this host?", exit.Code)
	}
	if !exit.OOMKilled {
		t.Error("exit status of an OOM-killed container has no OOMKilled")
	}
	// The marker is there when the exit is reported, for a Runtime that
	// takes over after a restart.
	if !runtime.OOMMarked(opts.BundleDir) {
		t.Error("no oom marker when the OOM kill was reported")
	}
	if st, ok, err := r.Exited(id); err != nil || !ok || !st.OOMKilled {
		t.Errorf("Exited = %+v, %v, %v; want OOMKilled", st, ok, err)
	}
}

// TestIntegrationRestart stands for podbayd being restarted: the first
// Runtime is closed while a container writes, another exits while no
// Runtime runs, and a second Runtime on the same state takes over.
func TestIntegrationRestart(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	first := e.rt
	pod := e.startPod(ctx, first, "pod")
	ticker, tickOpts := e.run(ctx, first, pod, "ticker", nil, "sh", "-c", tickScript)
	short, _ := e.run(ctx, first, pod, "short", nil, "sh", "-c", "sleep 0.3; exit 4")
	reader, readerOpts := e.newContainer(pod, "reader", nil, "sh", "-c", "while read line; do echo got:$line; done")
	readerOpts.Stdin = true
	e.create(ctx, first, readerOpts)
	if err := first.Start(ctx, reader); err != nil {
		t.Fatal(err)
	}
	before, err := first.State(ctx, ticker)
	if err != nil {
		t.Fatal(err)
	}
	testbundle.WaitFor(5*time.Second, func() bool { return len(ticks(readFile(t, tickOpts.LogPath))) >= 5 })
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := first.State(ctx, ticker); err == nil {
		t.Error("State after Close succeeded")
	}
	down := len(ticks(readFile(t, tickOpts.LogPath)))
	time.Sleep(time.Second) // "short" exits meanwhile

	second := e.newRuntime()
	if exit, ok, err := second.Exited(short); err != nil || !ok || exit.Code != 4 {
		t.Errorf("Exited after restart = (%+v, %v, %v), want 4", exit, ok, err)
	}
	if st, err := second.State(ctx, short); err != nil || st.Status != runtime.StatusStopped {
		t.Errorf("State of the exited container after restart = %+v, %v", st, err)
	}
	st, err := second.State(ctx, ticker)
	if err != nil || st.Status != runtime.StatusRunning || st.Pid != before.Pid || st.MonitorPid != before.MonitorPid {
		t.Fatalf("State after restart = %+v, %v; before %+v", st, err, before)
	}
	// The output goes on, nothing lost while no Runtime ran.
	if !testbundle.WaitFor(5*time.Second, func() bool { return len(ticks(readFile(t, tickOpts.LogPath))) > down+60 }) {
		t.Fatalf("the log did not grow after the restart: %d ticks, %d at the restart", len(ticks(readFile(t, tickOpts.LogPath))), down)
	}
	if res, err := second.ExecSync(ctx, ticker, runtime.ExecOptions{Args: []string{"echo", "alive"}}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("ExecSync after restart = %+v, %v", res, err)
	}
	// The stdin writer is back.
	if err := second.Attach(ctx, reader, runtime.AttachOptions{Stdin: strings.NewReader("after\n")}); err != nil {
		t.Fatalf("Attach after restart: %v", err)
	}
	if !testbundle.WaitFor(5*time.Second, func() bool { return strings.Contains(readFile(t, readerOpts.LogPath), " stdout F got:after\n") }) {
		t.Errorf("input after restart did not arrive: %q", readFile(t, readerOpts.LogPath))
	}
	if err := second.Stop(ctx, ticker, 0, 0); err != nil {
		t.Fatal(err)
	}
	if exit, err := second.Wait(ctx, ticker); err != nil || exit.Code != 137 {
		t.Errorf("Wait after restart = %+v, %v", exit, err)
	}
	checkConsecutive(t, ticks(readFile(t, tickOpts.LogPath)))
}

// TestIntegrationDeadShim kills a pod's shim: its containers are reported
// exited with 137, as containerd does, their processes are killed (the
// shim binary's delete), and Delete cleans up.
func TestIntegrationDeadShim(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	r := e.rt
	pod := e.startPod(ctx, r, "pod")
	id, _ := e.run(ctx, r, pod, "victim", nil, "sleep", "100")
	st, err := r.State(ctx, id)
	if err != nil || st.MonitorPid <= 0 {
		t.Fatalf("State = %+v, %v", st, err)
	}
	if err := syscall.Kill(st.MonitorPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{id, pod} {
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		exit, err := r.Wait(wctx, c)
		wcancel()
		if err != nil || exit.Code != 137 {
			t.Errorf("Wait %s after the shim died = %+v, %v", c, exit, err)
		}
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != runtime.StatusStopped || st.MonitorPid != 0 {
		t.Errorf("State after the shim died = %+v, %v", st, err)
	}
	if !testbundle.WaitFor(5*time.Second, func() bool { return len(testbundle.ProcessesOf(id)) == 0 }) {
		t.Errorf("container processes survive their dead shim: %q", testbundle.ProcessesOf(id))
	}
	if _, err := os.Lstat(e.shimSocket(pod)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dead shim's socket: %v", err)
	}
	if _, err := r.ExecSync(ctx, id, runtime.ExecOptions{Args: []string{"true"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ExecSync after the shim died = %v, want ErrFailedPrecondition", err)
	}
	_, opts := e.newContainer(pod, "late", nil, "true")
	if _, err := r.Create(ctx, opts); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Create in a pod whose shim died = %v, want ErrFailedPrecondition", err)
	}
	if err := r.Stop(ctx, id, time.Second, 0); err != nil {
		t.Errorf("Stop: %v", err)
	}
	for _, c := range []string{id, pod} {
		if err := r.Delete(ctx, c); err != nil {
			t.Errorf("Delete %s: %v", c, err)
		}
	}
}

// TestIntegrationRestartDeadShim kills a pod's shim while no Runtime
// runs: the next one reports the pod's containers exited at once.
func TestIntegrationRestartDeadShim(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	first := e.rt
	pod := e.startPod(ctx, first, "pod")
	id, _ := e.run(ctx, first, pod, "victim", nil, "sleep", "100")
	st, err := first.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.MonitorPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbundle.WaitFor(5*time.Second, func() bool { return len(shimsOf(pod)) == 0 })

	second := e.newRuntime()
	for _, c := range []string{id, pod} {
		if exit, ok, err := second.Exited(c); err != nil || !ok || exit.Code != 137 {
			t.Errorf("Exited %s after restart = (%+v, %v, %v), want 137", c, exit, ok, err)
		}
	}
	if !testbundle.WaitFor(5*time.Second, func() bool { return len(testbundle.ProcessesOf(id)) == 0 }) {
		t.Errorf("container processes survive their dead shim: %q", testbundle.ProcessesOf(id))
	}
	for _, c := range []string{id, pod} {
		if err := second.Delete(ctx, c); err != nil {
			t.Errorf("Delete %s: %v", c, err)
		}
	}
}
