package shim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

const (
	// execOutputGrace is how long an exec's output is read after the
	// process exited: a child it left behind may hold the output open.
	execOutputGrace = time.Second
	// execKillGrace bounds the wait for a killed exec to exit.
	execKillGrace = 5 * time.Second
	// maxTerminalSize is the largest width and height passed on, as in
	// internal/runtime.
	maxTerminalSize = 1000
)

// ExecSync runs a process in container id, which must be running, and
// waits for it. The process gets the container's process settings from the
// bundle's config.json, without a terminal, with opts applied on top, and
// an empty stdin; the result follows runtime.ExecResult.
//
// On timeout the process is killed (SIGKILL, through the shim: only the
// process itself, the shim has no way to reach its children); the result
// has ExitCode -1, TimedOut and the output until then. An unknown ID gives
// an error wrapping errdefs.ErrNotFound, a container that is not running
// errdefs.ErrFailedPrecondition; a process that cannot be started, or ctx
// ending (the process is killed), is an error.
// The runtime refusing to start the program the exec names (not found, not
// executable) is the request's error: errdefs.ErrInvalidArgument.
func (r *Runtime) ExecSync(ctx context.Context, id string, opts runtime.ExecOptions) (runtime.ExecResult, error) {
	res, err := r.execSync(ctx, id, opts)
	return res, runtime.ClassifyExec(err)
}

// execSync is ExecSync before its failure is classified.
func (r *Runtime) execSync(ctx context.Context, id string, opts runtime.ExecOptions) (runtime.ExecResult, error) {
	e, err := r.startExec(ctx, id, opts, execStdio{})
	if err != nil {
		return runtime.ExecResult{}, err
	}
	defer e.close(ctx)

	out := opts.Output
	if out == nil {
		out = runtime.NewExecOutput(nil)
	}
	outs := []*output{copyTo(out.Stdout, e.fifos.stdout), copyTo(out.Stderr, e.fifos.stderr)}
	// A reader cut off stops waiting for out's gate too.
	waitOutputs := func(grace time.Duration, outs []*output) {
		waitOutputsThen(grace, outs, out.Stop)
		out.Stop()
	}
	result := func(code int32, timedOut bool) runtime.ExecResult {
		res := runtime.ExecResult{ExitCode: code, TimedOut: timedOut}
		out.Result(&res)
		return res
	}
	var timeout <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-e.exited:
		e.waited = &res
		if res.err != nil {
			waitOutputs(0, outs)
			return runtime.ExecResult{}, fmt.Errorf("exec in container %s: %w", id, res.err)
		}
		waitOutputs(execOutputGrace, outs)
		return result(res.code, false), nil
	case <-timeout:
		log.G(ctx).Debug("exec timed out, killing it", "id", id, "timeout", opts.Timeout)
		// The output until now is the answer: it waits for no gate.
		out.Stop()
		err := e.kill(ctx)
		waitOutputs(0, outs)
		if err != nil {
			return runtime.ExecResult{}, fmt.Errorf("exec in container %s: %w", id, err)
		}
		return result(-1, true), nil
	case <-ctx.Done():
		out.Stop()
		if err := e.kill(ctx); err != nil {
			log.G(ctx).Error("kill cancelled exec", "id", id, "err", err)
		}
		waitOutputs(0, outs)
		return runtime.ExecResult{}, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	}
}

// Exec runs a process in container id, which must be running, copies its
// stdio from and to the streams in opts, and returns its exit status once
// it has exited and its output has been copied, as internal/oci does: with
// Tty the process gets a terminal, resized from opts.Resize; without, the
// end of Stdin closes the process's stdin. When ctx ends first, the
// process is killed and ctx's error returned.
func (r *Runtime) Exec(ctx context.Context, id string, opts runtime.ExecStreamOptions) (int32, error) {
	how := execStdio{tty: opts.Tty, stdin: opts.Stdin != nil}
	if opts.Tty {
		// A size that is already there is the one the terminal starts with.
		select {
		case size, ok := <-opts.Resize:
			if ok {
				how.size = &size
			}
		default:
		}
	}
	e, err := r.startExec(ctx, id, runtime.ExecOptions{Args: opts.Args}, how)
	if err != nil {
		return 0, err
	}
	defer e.close(ctx)

	outs := []*output{copyTo(runtime.WriterOrDiscard(opts.Stdout), e.fifos.stdout)}
	if e.fifos.stderr != nil {
		outs = append(outs, copyTo(runtime.WriterOrDiscard(opts.Stderr), e.fifos.stderr))
	}
	if opts.Stdin != nil {
		go e.copyStdin(opts.Stdin, !opts.Tty)
	}
	stop := make(chan struct{})
	defer close(stop)
	if opts.Tty {
		if how.size != nil {
			e.resize(ctx, *how.size)
		}
		if opts.Resize != nil {
			go runtime.ApplyResizes(opts.Resize, stop, func(size runtime.Size) { e.resize(ctx, size) })
		}
	}

	select {
	case res := <-e.exited:
		e.waited = &res
		if res.err != nil {
			waitOutputs(0, outs)
			return 0, fmt.Errorf("exec in container %s: %w", id, res.err)
		}
		waitOutputs(execOutputGrace, outs)
		return res.code, nil
	case <-ctx.Done():
		log.G(ctx).Debug("exec cancelled, killing it", "id", id, "reason", context.Cause(ctx))
		if err := e.kill(ctx); err != nil {
			log.G(ctx).Error("kill cancelled exec", "id", id, "err", err)
		}
		waitOutputs(0, outs)
		return 0, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	}
}

// execStdio says which stdio an exec gets.
type execStdio struct {
	tty   bool
	stdin bool
	size  *runtime.Size // the terminal's first size
}

// execProc is one exec'd process in a container's task.
type execProc struct {
	r      *Runtime
	c      *container
	id     string
	dir    string
	fifos  *stdio
	tasks  taskapi.TaskService
	exited chan execExit // receives the Wait result, once
	// started is set once the shim started the process.
	started bool
	// waited is the Wait result once received from exited.
	waited *execExit
}

type execExit struct {
	code int32
	err  error
}

// startExec starts a process in container id and starts waiting for it.
// The caller must close it.
func (r *Runtime) startExec(ctx context.Context, id string, opts runtime.ExecOptions, how execStdio) (_ *execProc, retErr error) {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("exec in container: %w", err)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if err := r.checkRunning(ctx, c); err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	tasks, err := r.liveTasks(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	spec, err := runtime.ReadSpec(c.rec.Bundle)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	proc, err := runtime.ExecProcess(spec.Process, opts)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	proc.Terminal = how.tty
	if how.size != nil {
		s := clampSize(*how.size)
		proc.ConsoleSize = &specs.Box{Height: uint(s.Height), Width: uint(s.Width)}
	}
	procAny, err := processAny(proc)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}

	e := &execProc{r: r, c: c, id: newExecID(), tasks: tasks, exited: make(chan execExit, 1)}
	e.dir = filepath.Join(c.dir, e.id)
	if err := os.Mkdir(e.dir, 0o700); err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	defer undo.OnError(ctx, &retErr, "remove exec stdio", func(context.Context) error {
		return os.RemoveAll(e.dir)
	})
	if e.fifos, err = openStdio(e.dir, how.stdin, how.tty, true); err != nil {
		return nil, fmt.Errorf("exec in container %s: stdio: %w", id, err)
	}
	defer undo.OnError(ctx, &retErr, "close exec stdio", func(context.Context) error {
		e.fifos.close()
		return nil
	})

	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	if _, err := tasks.Exec(cctx, &taskapi.ExecProcessRequest{
		ID:       id,
		ExecID:   e.id,
		Terminal: how.tty,
		Stdin:    e.fifos.stdinPath,
		Stdout:   e.fifos.stdoutPath,
		Stderr:   e.fifos.stderrPath,
		Spec:     procAny,
	}); err != nil {
		return nil, r.execFailure(ctx, c, rpcError(err))
	}
	defer undo.OnError(ctx, &retErr, "delete exec", func(ctx context.Context) error {
		return e.delete(ctx)
	})
	if _, err := tasks.Start(cctx, &taskapi.StartRequest{ID: id, ExecID: e.id}); err != nil {
		return nil, r.execFailure(ctx, c, rpcError(err))
	}
	e.started = true
	go func() {
		// Ends when the process exits, or when the connection is lost
		// (the shim died, or the Runtime was closed).
		resp, err := tasks.Wait(r.ctx, &taskapi.WaitRequest{ID: id, ExecID: e.id})
		if err != nil {
			e.exited <- execExit{err: rpcError(err)}
			return
		}
		e.exited <- execExit{code: int32(resp.ExitStatus)}
	}()
	return e, nil
}

// checkRunning returns an error wrapping ErrFailedPrecondition unless c
// runs.
func (r *Runtime) checkRunning(ctx context.Context, c *container) error {
	st, err := r.State(ctx, c.id)
	if err != nil {
		return err
	}
	if st.Status != runtime.StatusRunning {
		return fmt.Errorf("container is %s: %w", st.Status, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// execFailure is the error for an exec the shim could not start. The
// container may have stopped since it was checked: that is
// FailedPrecondition.
func (r *Runtime) execFailure(ctx context.Context, c *container, err error) error {
	if stErr := r.checkRunning(ctx, c); errors.Is(stErr, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return fmt.Errorf("exec in container %s: %w: %w", c.id, err, stErr)
	}
	return fmt.Errorf("exec in container %s: %w", c.id, err)
}

func newExecID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "exec-" + hex.EncodeToString(b)
}

// wait returns the Wait result, waiting up to d for it.
func (e *execProc) wait(d time.Duration) (execExit, bool) {
	if e.waited != nil {
		return *e.waited, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case res := <-e.exited:
		e.waited = &res
		return res, true
	case <-t.C:
		return execExit{}, false
	}
}

// kill kills the process and waits for it to exit.
func (e *execProc) kill(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undo.Timeout)
	defer cancel()
	_, err := e.tasks.Kill(ctx, &taskapi.KillRequest{ID: e.c.id, ExecID: e.id, Signal: uint32(syscall.SIGKILL)})
	if err = rpcError(err); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill exec: %w", err)
	}
	if _, ok := e.wait(execKillGrace); !ok {
		return fmt.Errorf("exec still running %v after SIGKILL", execKillGrace)
	}
	return nil
}

// delete deletes the exec in the shim, once it has exited.
func (e *execProc) delete(ctx context.Context) error {
	if _, ok := e.wait(0); e.started && !ok {
		if err := e.kill(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := e.r.commandContext(context.WithoutCancel(ctx))
	defer cancel()
	_, err := e.tasks.Delete(ctx, &taskapi.DeleteRequest{ID: e.c.id, ExecID: e.id})
	if err = rpcError(err); err != nil && !errdefs.IsNotFound(err) && !errors.Is(err, errShimGone) {
		return fmt.Errorf("delete exec: %w", err)
	}
	return nil
}

// close deletes the exec and removes its stdio; the process must have
// exited or been killed.
func (e *execProc) close(ctx context.Context) {
	if err := e.delete(ctx); err != nil {
		log.G(ctx).Warn("delete exec", "id", e.c.id, "exec", e.id, "err", err)
	}
	e.fifos.close()
	if err := os.RemoveAll(e.dir); err != nil {
		log.G(ctx).Warn("remove exec stdio", "id", e.c.id, "exec", e.id, "err", err)
	}
}

// copyStdin copies in to the process's stdin. At its end with closeAtEnd
// the process reads end of file: podbay's end and the shim's (CloseIO)
// are closed.
func (e *execProc) copyStdin(in io.Reader, closeAtEnd bool) {
	_, _ = io.Copy(e.fifos.stdin, in)
	if !closeAtEnd {
		return
	}
	// Closed only once the shim has read what was written: the shim opens
	// its read end of the FIFO in the background, and a FIFO that no one
	// holds open drops what is buffered in it — the data would be lost,
	// and the shim's open, finding no writer left, would never return.
	waitFifoDrained(e.r.ctx, e.fifos.stdin)
	e.fifos.stdin.Close()
	ctx, cancel := e.r.commandContext(e.r.ctx)
	defer cancel()
	_, err := e.tasks.CloseIO(ctx, &taskapi.CloseIORequest{ID: e.c.id, ExecID: e.id, Stdin: true})
	if err = rpcError(err); err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).Debug("close exec stdin", "id", e.c.id, "exec", e.id, "err", err)
	}
}

// resize sets the size of the process's terminal; best effort, as a
// terminal's resize is.
func (e *execProc) resize(ctx context.Context, size runtime.Size) {
	size = clampSize(size)
	ctx, cancel := e.r.commandContext(ctx)
	defer cancel()
	_, err := e.tasks.ResizePty(ctx, &taskapi.ResizePtyRequest{ID: e.c.id, ExecID: e.id, Width: uint32(size.Width), Height: uint32(size.Height)})
	if err != nil {
		log.G(ctx).Debug("resize exec terminal", "id", e.c.id, "exec", e.id, "err", rpcError(err))
	}
}

func clampSize(s runtime.Size) runtime.Size {
	return runtime.Size{Width: min(s.Width, maxTerminalSize), Height: min(s.Height, maxTerminalSize)}
}

// copyTo copies r to w until r ends or is closed. When w fails, the rest
// is read and discarded: the process must not block on a full pipe.
func copyTo(w io.Writer, r *fifoReader) *output {
	o := &output{r: r, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		buf := make([]byte, copyBufSize)
		for {
			n, err := r.Read(buf)
			if n > 0 && w != nil {
				if _, werr := w.Write(buf[:n]); werr != nil {
					w = nil
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return o
}
