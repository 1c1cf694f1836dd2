package oci

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/test/testbundle"
)

// waitOutput waits until b holds want, repeating poke (if any) every half
// second, as for a resize that needs a moment to reach the container.
func waitOutput(t *testing.T, b *testbundle.Buffer, want string, poke func()) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	next := time.Now()
	for time.Now().Before(deadline) {
		if strings.Contains(b.String(), want) {
			return
		}
		if poke != nil && time.Now().After(next) {
			poke()
			next = time.Now().Add(500 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("output %q does not contain %q", b.String(), want)
}

// withTerminal gives the container a devpts, which a terminal needs.
func withTerminal(s *specs.Spec) {
	s.Mounts = append(s.Mounts, specs.Mount{
		Destination: "/dev/pts", Type: "devpts", Source: "devpts",
		Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"},
	})
}

// execResult is what a session returned.
type execResult struct {
	code int32
	err  error
}

// startOwnedExec runs Exec in the background, under a context of its own
// that the test's cleanup cancels, waiting for Exec to return: a subtest
// that fails halfway leaves no shell behind in the container for the
// next one's checks. cancel ends the exec as a client that went away.
func startOwnedExec(ctx context.Context, t *testing.T, rt *Runtime, id string, opts runtime.ExecStreamOptions) (_ <-chan execResult, cancel func()) {
	t.Helper()
	ctx, cancel = context.WithCancel(ctx)
	res := make(chan execResult, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, err := rt.Exec(ctx, id, opts)
		res <- execResult{code, err}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Exec did not return after its context was cancelled")
		}
	})
	return res, cancel
}

func waitExec(t *testing.T, ch <-chan execResult) execResult {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not return")
		return execResult{}
	}
}

func TestIntegrationExecStream(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)
	id, _ := e.startContainer(ctx, "execstream", runtime.CreateOptions{}, nil, "sleep", "1000")

	for _, tc := range []struct {
		name             string
		args             []string
		stdin            io.Reader
		wantOut, wantErr string
		wantCode         int32
	}{
		{name: "stdin echoed", args: []string{"cat"}, stdin: strings.NewReader("hello\nworld\n"), wantOut: "hello\nworld\n"},
		{name: "no stdin", args: []string{"cat"}},
		{name: "streams apart and exit code", args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, wantOut: "out\n", wantErr: "err\n", wantCode: 3},
		{name: "killed by a signal", args: []string{"sh", "-c", "kill -9 $$"}, wantCode: 128 + 9},
		{name: "big output", args: []string{"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo 0123456789012345678901234567890123456789; i=$((i+1)); done"}, wantOut: strings.Repeat("0123456789012345678901234567890123456789\n", 2000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr testbundle.Buffer
			code, err := e.rt.Exec(ctx, id, runtime.ExecStreamOptions{Args: tc.args, Stdin: tc.stdin, Stdout: &stdout, Stderr: &stderr})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if code != tc.wantCode || stdout.String() != tc.wantOut || stderr.String() != tc.wantErr {
				t.Errorf("Exec = %d, stdout %.80q, stderr %q; want %d, %.80q, %q", code, stdout.String(), stderr.String(), tc.wantCode, tc.wantOut, tc.wantErr)
			}
			assertExecGone(t, id, "sleep 1000")
		})
	}

	t.Run("output discarded", func(t *testing.T) {
		code, err := e.rt.Exec(ctx, id, runtime.ExecStreamOptions{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 4"}})
		if err != nil || code != 4 {
			t.Fatalf("Exec = %d, %v; want 4", code, err)
		}
	})

	t.Run("unknown command", func(t *testing.T) {
		_, err := e.rt.Exec(ctx, id, runtime.ExecStreamOptions{Args: []string{"no-such-command"}, Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "no-such-command") {
			t.Fatalf("Exec of an unknown command = %v, want the runtime's error", err)
		}
	})

	t.Run("client gone", func(t *testing.T) {
		var stdout testbundle.Buffer
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close()
		ch, stop := startOwnedExec(ctx, t, e.rt, id, runtime.ExecStreamOptions{
			// The background sleep is in the process's group; cat waits
			// for input that never comes.
			Args:   []string{"sh", "-c", "sleep 999 & echo started; cat"},
			Stdin:  stdinR,
			Stdout: &stdout,
		})
		waitOutput(t, &stdout, "started", nil)
		stop()
		if res := waitExec(t, ch); !errors.Is(res.err, context.Canceled) {
			t.Fatalf("Exec after the client went = %d, %v; want context.Canceled", res.code, res.err)
		}
		assertExecGone(t, id, "sleep 1000")
	})
}

func TestIntegrationExecStreamTerminal(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)
	id, _ := e.startContainer(ctx, "exectty", runtime.CreateOptions{}, withTerminal, "sleep", "1000")

	t.Run("interactive shell", func(t *testing.T) {
		var out testbundle.Buffer
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close()
		resize := make(chan runtime.Size, 1)
		resize <- runtime.Size{Width: 80, Height: 24} // the client's first size
		ch, _ := startOwnedExec(ctx, t, e.rt, id, runtime.ExecStreamOptions{Args: []string{"sh"}, Tty: true, Stdin: stdinR, Stdout: &out, Resize: resize})
		send := func(line string) {
			if _, err := io.WriteString(stdinW, line+"\n"); err != nil {
				t.Errorf("write %q: %v", line, err)
			}
		}

		// Typed after the prompt: input typed ahead is echoed by the
		// terminal before the shell takes it over, which under load can
		// interleave with the shell's own output.
		waitOutput(t, &out, "/ # ", nil)
		send("[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-$((3*4))-terminals")
		// ONLCR: the terminal turns the newline into CR LF.
		waitOutput(t, &out, "all-12-terminals\r\n", nil)
		send("busybox stty size")
		waitOutput(t, &out, "24 80\r\n", nil)
		resize <- runtime.Size{Width: 123, Height: 45}
		waitOutput(t, &out, "45 123\r\n", func() { send("busybox stty size") })
		send("exit 7")
		if res := waitExec(t, ch); res.err != nil || res.code != 7 {
			t.Fatalf("Exec = %d, %v; want exit code 7\n%q", res.code, res.err, out.String())
		}
		// Only one of the two terminals (the runtime's and the process's)
		// translates newlines. With runc it is the runtime's, and runc
		// clears ONLCR on the process's terminal only after the shell may
		// have started: a shell that saved its settings before that
		// restores ONLCR when its first line ends. Exec locks it off
		// before it passes on any input, so from the first command on no
		// newline gets two carriage returns. (What the shell wrote before
		// runc cleared ONLCR, its banner, may carry two: runc's own race,
		// and a terminal shows CR CR LF as CR LF.)
		o := out.String()
		if i := strings.Index(o, "[ -t 0 ]"); i < 0 || strings.Contains(o[i:], "\r\r\n") {
			t.Errorf("output was processed twice:\n%q", o)
		}
		assertExecGone(t, id, "sleep 1000")
	})

	t.Run("settings restored", func(t *testing.T) {
		// A process that turns ONLCR back on once its input came, as a
		// shell restoring the settings it saved before the runtime set its
		// terminal up: the lock keeps the newlines single.
		var out testbundle.Buffer
		ch, _ := startOwnedExec(ctx, t, e.rt, id, runtime.ExecStreamOptions{
			Args: []string{"sh", "-c", "read x; busybox stty onlcr 2>/dev/null; echo one; echo two-$x"},
			Tty:  true, Stdin: strings.NewReader("go\n"), Stdout: &out,
		})
		if res := waitExec(t, ch); res.err != nil || res.code != 0 {
			t.Fatalf("Exec = %d, %v; want exit code 0\n%q", res.code, res.err, out.String())
		}
		if o := out.String(); o != "go\r\none\r\ntwo-go\r\n" {
			t.Errorf("output = %q, want %q", o, "go\r\none\r\ntwo-go\r\n")
		}
		assertExecGone(t, id, "sleep 1000")
	})

	t.Run("client gone", func(t *testing.T) {
		var out testbundle.Buffer
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close()
		ch, stop := startOwnedExec(ctx, t, e.rt, id, runtime.ExecStreamOptions{Args: []string{"sh"}, Tty: true, Stdin: stdinR, Stdout: &out})
		// An interactive shell on a terminal runs each job in a process
		// group of its own: only the session holds them all.
		if _, err := io.WriteString(stdinW, "sleep 999 & sleep 998 & echo jobs-$((2*3))-started; sleep 997\n"); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, &out, "jobs-6-started", nil)
		time.Sleep(200 * time.Millisecond) // the foreground sleep starts
		stop()
		if res := waitExec(t, ch); !errors.Is(res.err, context.Canceled) {
			t.Fatalf("Exec after the client went = %d, %v; want context.Canceled", res.code, res.err)
		}
		assertExecGone(t, id, "sleep 1000")
	})
}

func TestIntegrationAttach(t *testing.T) {
	e, ctx := newTestEnv(t, 2*time.Minute)

	t.Run("stdin once", func(t *testing.T) {
		id, _ := e.startContainer(ctx, "attachonce", runtime.CreateOptions{Stdin: true, StdinOnce: true}, nil, "cat")
		var stdout testbundle.Buffer
		stdinR, stdinW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- e.rt.Attach(ctx, id, runtime.AttachOptions{Stdin: stdinR, Stdout: &stdout, StdinOnce: true})
		}()
		if _, err := io.WriteString(stdinW, "hello\n"); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, &stdout, "hello\n", nil)
		// conmon closes the container's stdin: cat exits, and so does
		// the container; the attach lasts until then.
		stdinW.Close()
		awaitAttachEnd(ctx, t, e.rt, done, id, 0, "after the container's stdin closed")
	})

	t.Run("detach and reattach", func(t *testing.T) {
		id, _ := e.startContainer(ctx, "attachmany", runtime.CreateOptions{Stdin: true}, nil,
			"sh", "-c", `while read l; do echo "out $l"; echo "err $l" >&2; done`)
		// Without StdinOnce, the end of the client's input detaches, and
		// the container's stdin stays open for the next attach.
		for _, word := range []string{"one", "two"} {
			var stdout, stderr testbundle.Buffer
			stdinR, stdinW := io.Pipe()
			done := make(chan error, 1)
			go func() {
				done <- e.rt.Attach(ctx, id, runtime.AttachOptions{Stdin: stdinR, Stdout: &stdout, Stderr: &stderr})
			}()
			if _, err := io.WriteString(stdinW, word+"\n"); err != nil {
				t.Fatal(err)
			}
			waitOutput(t, &stdout, "out "+word+"\n", nil)
			waitOutput(t, &stderr, "err "+word+"\n", nil)
			stdinW.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Attach: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Attach did not return at the end of its input")
			}
			if st, err := e.rt.State(ctx, id); err != nil || st.Status != runtime.StatusRunning {
				t.Fatalf("container after detach: %+v, %v; want running", st, err)
			}
		}
		// An attach with output only lasts until the client goes.
		short, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.rt.Attach(short, id, runtime.AttachOptions{Stdout: io.Discard}) }()
		time.Sleep(200 * time.Millisecond)
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Attach after the client went = %v, want context.Canceled", err)
		}
		if st, err := e.rt.State(ctx, id); err != nil || st.Status != runtime.StatusRunning {
			t.Fatalf("container after the client went: %+v, %v; want running", st, err)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		id := e.newID("attachtty")
		bundle := e.bundle(id, func(s *specs.Spec) {
			withTerminal(s)
			s.Process.Terminal = true
		}, "sh")
		logPath := filepath.Join(e.dir, id+".log")
		e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: bundle, LogPath: logPath, Terminal: true, Stdin: true})
		if err := e.rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		var out testbundle.Buffer
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close()
		resize := make(chan runtime.Size, 1)
		done := make(chan error, 1)
		go func() {
			done <- e.rt.Attach(ctx, id, runtime.AttachOptions{Stdin: stdinR, Stdout: &out, Tty: true, Resize: resize})
		}()
		send := func(line string) {
			if _, err := io.WriteString(stdinW, line+"\n"); err != nil {
				t.Errorf("write %q: %v", line, err)
			}
		}
		send("echo attached-$((5*5))")
		waitOutput(t, &out, "attached-25\r\n", nil)
		resize <- runtime.Size{Width: 100, Height: 40}
		waitOutput(t, &out, "40 100\r\n", func() { send("busybox stty size") })
		send("exit 5")
		awaitAttachEnd(ctx, t, e.rt, done, id, 5, "when the container exited")
	})

	t.Run("not running", func(t *testing.T) {
		id := e.newID("attachcreated")
		e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: e.bundle(id, nil, "true")})
		if err := e.rt.Attach(ctx, id, runtime.AttachOptions{Stdout: io.Discard}); err == nil {
			t.Fatal("Attach to a created container succeeded")
		}
	})
}

// awaitAttachEnd waits for the attach whose error done delivers to return
// (when says when it should), then for container id to exit with code.
func awaitAttachEnd(ctx context.Context, t *testing.T, r *Runtime, done <-chan error, id string, code int32, when string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Attach did not return " + when)
	}
	if exit, err := r.Wait(ctx, id); err != nil || exit.Code != code {
		t.Fatalf("Wait = %+v, %v; want exit code %d", exit, err, code)
	}
}
