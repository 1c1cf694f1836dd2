package shim

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// A container's stdio is a FIFO per stream in its state directory. The
// shim opens the other ends: it writes stdout and stderr (runc-v2 also
// keeps a read end of its own open, so its writes never fail while podbay
// is away; they wait once the FIFO is full) and reads stdin (keeping a
// write end open, so that clients may come and go; CloseIO closes it).
const (
	stdinFifo  = "stdin"
	stdoutFifo = "stdout"
	stderrFifo = "stderr"

	copyBufSize = 32 << 10
	// subscriberQueue is how many reads of output an attached client may
	// lag behind before reads are dropped for it.
	subscriberQueue = 128
)

// stdio are the FIFOs of one process, its paths for the shim and podbay's
// ends.
type stdio struct {
	stdinPath, stdoutPath, stderrPath string // "": none
	stdin                             *os.File
	stdout, stderr                    *fifoReader
}

// openStdio opens podbay's ends of the FIFOs in dir: stdin when withStdin,
// stdout, stderr unless terminal (a terminal merges it into stdout). With
// create the FIFOs are made first; otherwise they exist from before a
// restart.
func openStdio(dir string, withStdin, terminal, create bool) (_ *stdio, retErr error) {
	s := &stdio{stdoutPath: filepath.Join(dir, stdoutFifo)}
	if withStdin {
		s.stdinPath = filepath.Join(dir, stdinFifo)
	}
	if !terminal {
		s.stderrPath = filepath.Join(dir, stderrFifo)
	}
	defer func() {
		if retErr != nil {
			s.close()
		}
	}()
	for _, p := range []string{s.stdinPath, s.stdoutPath, s.stderrPath} {
		if p == "" || !create {
			continue
		}
		if err := mkfifo(p); err != nil {
			return nil, err
		}
	}
	var err error
	if s.stdinPath != "" {
		if s.stdin, err = openFifoWriter(s.stdinPath); err != nil {
			return nil, err
		}
	}
	if s.stdout, err = openFifoReader(s.stdoutPath); err != nil {
		return nil, err
	}
	if s.stderrPath != "" {
		if s.stderr, err = openFifoReader(s.stderrPath); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// close closes podbay's ends.
func (s *stdio) close() {
	if s.stdin != nil {
		s.stdin.Close()
	}
	if s.stdout != nil {
		s.stdout.Close()
	}
	if s.stderr != nil {
		s.stderr.Close()
	}
}

// containerIO copies a container's output to its log and attached
// clients, and holds its stdin for them.
type containerIO struct {
	fifos *stdio
	log   *logFile
	// stdout and stderr hand the output to attached clients; stderr is
	// nil with a terminal.
	stdout, stderr *broadcaster
	outputs        []*output // set by start

	stdinOnce sync.Once
	closeOnce sync.Once
}

func newContainerIO(ctx context.Context, fifos *stdio, l *logFile) *containerIO {
	c := &containerIO{fifos: fifos, log: l, stdout: newBroadcaster(ctx, "stdout")}
	if fifos.stderr != nil {
		c.stderr = newBroadcaster(ctx, "stderr")
	}
	return c
}

// start starts copying the output. wg tracks the copies.
func (c *containerIO) start(ctx context.Context, wg *sync.WaitGroup) {
	c.outputs = append(c.outputs, startOutput(ctx, wg, "stdout", c.fifos.stdout, c.log, c.stdout))
	if c.fifos.stderr != nil {
		c.outputs = append(c.outputs, startOutput(ctx, wg, "stderr", c.fifos.stderr, c.log, c.stderr))
	}
}

// stdin returns podbay's end of the container's stdin, nil if it has none.
func (c *containerIO) stdin() *os.File { return c.fifos.stdin }

// closeStdin closes podbay's end of the container's stdin: with the
// shim's end closed too (CloseIO), the container reads end of file.
func (c *containerIO) closeStdin() {
	c.stdinOnce.Do(func() {
		if c.fifos.stdin != nil {
			c.fifos.stdin.Close()
		}
	})
}

// finish waits up to timeout for the output to be copied to its end (the
// shim closes its ends once the container's output is closed), cuts off
// the copies still running, and closes the log and stdin. It is called
// once the container has exited, before the exit is reported.
func (c *containerIO) finish(timeout time.Duration) {
	if c == nil {
		return
	}
	waitOutputs(timeout, c.outputs)
	c.close()
}

// close stops the copies and closes everything, at once.
func (c *containerIO) close() {
	if c == nil {
		return
	}
	c.closeOnce.Do(func() {
		c.fifos.close()
		waitOutputs(0, c.outputs)
		c.closeStdin()
		c.log.close()
		// Without copies (never started) the clients are ended here.
		c.stdout.end()
		if c.stderr != nil {
			c.stderr.end()
		}
	})
}

// output copies one output stream of a container.
type output struct {
	r    *fifoReader
	done chan struct{}
}

func startOutput(ctx context.Context, wg *sync.WaitGroup, stream string, r *fifoReader, l *logFile, b *broadcaster) *output {
	o := &output{r: r, done: make(chan struct{})}
	lw := newLineWriter(l, stream)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(o.done)
		buf := make([]byte, copyBufSize)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				b.write(buf[:n])
				_, _ = lw.Write(buf[:n])
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !isClosedRead(err) {
					log.G(ctx).Warn("read container output", "stream", stream, "err", err)
				}
				break
			}
		}
		lw.flush()
		if lw.err != nil {
			log.G(ctx).Warn("write container log", "stream", stream, "path", l.path, "err", lw.err)
		}
		b.end()
	}()
	return o
}

// waitOutputs gives the copies up to grace to reach the end of their
// input, then closes the inputs of those still running and waits for
// them to stop.
func waitOutputs(grace time.Duration, outputs []*output) {
	waitOutputsThen(grace, outputs, nil)
}

// waitOutputsThen is waitOutputs that also calls cutOff, when set, as it
// closes an output.
func waitOutputsThen(grace time.Duration, outputs []*output, cutOff func()) {
	done := make([]<-chan struct{}, len(outputs))
	for i, o := range outputs {
		done[i] = o.done
	}
	runtime.AwaitDone(grace, 0, done, func(i int) {
		outputs[i].r.Close()
		if cutOff != nil {
			cutOff()
		}
	})
}

// broadcaster hands one output stream to the attached clients. A client
// that falls behind by more than subscriberQueue reads misses output
// rather than holding up the container and its log.
type broadcaster struct {
	ctx    context.Context // for logging
	stream string

	mu    sync.Mutex
	subs  map[*subscriber]struct{} // guarded by mu
	ended bool                     // guarded by mu
}

type subscriber struct {
	ch      chan []byte
	done    chan struct{} // closed once everything queued was handed over
	dropped bool          // guarded by the broadcaster's mu
}

func newBroadcaster(ctx context.Context, stream string) *broadcaster {
	return &broadcaster{ctx: ctx, stream: stream, subs: make(map[*subscriber]struct{})}
}

// subscribe starts handing the stream to w from now on. The subscriber's
// done is closed when the stream ends (at once if it has ended) or after
// unsubscribe. A w that fails is not written to again.
func (b *broadcaster) subscribe(w io.Writer) *subscriber {
	s := &subscriber{ch: make(chan []byte, subscriberQueue), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for p := range s.ch {
			if w == nil {
				continue
			}
			if _, err := w.Write(p); err != nil {
				w = nil
			}
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		close(s.ch)
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

func (b *broadcaster) unsubscribe(s *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.ch)
	}
}

func (b *broadcaster) write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- append([]byte(nil), p...):
		default:
			if !s.dropped {
				s.dropped = true
				log.G(b.ctx).Warn("attached client is not reading; dropping output for it", "stream", b.stream)
			}
		}
	}
}

// end ends the stream for every client.
func (b *broadcaster) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return
	}
	b.ended = true
	for s := range b.subs {
		close(s.ch)
	}
	b.subs = nil
}

// copyShimLog copies the shim's own log, read from the FIFO r, line by
// line into the daemon's log at debug level, until r ends or is closed.
func copyShimLog(ctx context.Context, wg *sync.WaitGroup, r *fifoReader) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		br := bufio.NewReaderSize(r, 16<<10)
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				log.G(ctx).Debug("shim log", "line", string(trimNewline(line)))
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				if !errors.Is(err, io.EOF) && !isClosedRead(err) {
					log.G(ctx).Warn("read shim log", "err", err)
				}
				return
			}
		}
	}()
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}
