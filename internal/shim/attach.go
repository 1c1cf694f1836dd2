package shim

import (
	"context"
	"fmt"
	"io"
	"os"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// Attach connects the streams in opts to container id, which must be
// running, with the semantics of runtime.Runtime.Attach: Stdout and Stderr
// get what the container writes from now on (everything is stdout with a
// terminal); Stdin goes to the container's stdin when it was created with
// one (and is read and dropped otherwise); Resize resizes its terminal.
// Attach returns when the container exits, when ctx ends (with ctx's
// error), or when Stdin ends and the attach has neither Tty nor StdinOnce.
// When Stdin ends and the container was created with StdinOnce (and no
// terminal), the container's stdin is closed, once. A Read on Stdin that
// is under way when Attach returns is not waited for; what it reads is
// dropped.
//
// An unknown ID gives an error wrapping errdefs.ErrNotFound; a container
// that is not running errdefs.ErrFailedPrecondition.
func (r *Runtime) Attach(ctx context.Context, id string, opts runtime.AttachOptions) error {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return fmt.Errorf("attach to container: %w", err)
	}
	if err := r.checkRunning(ctx, c); err != nil {
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	if c.io == nil {
		return fmt.Errorf("attach to container %s: its output is not copied: %w", id, errdefs.ErrFailedPrecondition)
	}

	subs := []*subscriber{c.io.stdout.subscribe(opts.Stdout)}
	if c.io.stderr != nil {
		subs = append(subs, c.io.stderr.subscribe(opts.Stderr))
	}
	defer func() {
		c.io.stdout.unsubscribe(subs[0])
		if c.io.stderr != nil {
			c.io.stderr.unsubscribe(subs[1])
		}
	}()
	outputDone := make(chan struct{})
	go func() {
		defer close(outputDone)
		for _, s := range subs {
			<-s.done
		}
	}()

	stop := make(chan struct{})
	defer close(stop)
	var inputDone chan struct{}
	if opts.Stdin != nil {
		inputDone = make(chan struct{})
		go func() {
			defer close(inputDone)
			var w io.Writer = io.Discard
			if f := c.io.stdin(); f != nil {
				w = &stoppableWriter{f: f, stop: stop}
			}
			_, _ = io.Copy(w, opts.Stdin)
		}()
	}
	if opts.Tty && opts.Resize != nil {
		go runtime.ApplyResizes(opts.Resize, stop, func(size runtime.Size) { r.resize(ctx, c, size) })
	}

	select {
	case <-outputDone:
		return nil
	case <-inputDone:
		if c.rec.StdinOnce && !c.rec.Terminal {
			r.closeStdin(ctx, c)
		}
		if !opts.Tty && !opts.StdinOnce {
			return nil
		}
	case <-ctx.Done():
		return fmt.Errorf("attach to container %s: %w", id, ctx.Err())
	}
	select {
	case <-outputDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("attach to container %s: %w", id, ctx.Err())
	}
}

// closeStdin closes the container's stdin: podbay's end of the FIFO and
// the shim's (CloseIO), after which the container reads end of file.
func (r *Runtime) closeStdin(ctx context.Context, c *container) {
	c.io.closeStdin()
	tasks, err := c.pod.task(ctx)
	if err != nil {
		return
	}
	cctx, cancel := r.commandContext(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := tasks.CloseIO(cctx, &taskapi.CloseIORequest{ID: c.id, Stdin: true}); err != nil {
		log.G(ctx).Debug("close container stdin", "id", c.id, "err", rpcError(err))
	}
}

// resize sets the size of the container's terminal; best effort, as a
// terminal's resize is.
func (r *Runtime) resize(ctx context.Context, c *container, size runtime.Size) {
	tasks, err := c.pod.task(ctx)
	if err != nil {
		return
	}
	size = clampSize(size)
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	if _, err := tasks.ResizePty(cctx, &taskapi.ResizePtyRequest{ID: c.id, Width: uint32(size.Width), Height: uint32(size.Height)}); err != nil {
		log.G(ctx).Debug("resize container terminal", "id", c.id, "err", rpcError(err))
	}
}

// stoppableWriter writes to f until stop is closed: an attach's input
// that arrives after the attach ended is dropped.
type stoppableWriter struct {
	f    *os.File
	stop <-chan struct{}
}

func (w *stoppableWriter) Write(p []byte) (int, error) {
	select {
	case <-w.stop:
		return 0, io.ErrClosedPipe
	default:
	}
	return w.f.Write(p)
}
