package runtime

import (
	"sync"
)

const (
	// smallOutput is how far a CappedBuffer grows by appending. Past it,
	// the buffer moves once into one allocation as large as it can ever
	// become: growing a 16 MiB buffer by append would leave about four
	// times its size in garbage (Go grows large slices by 1.25x), and a
	// fresh allocation costs no memory until it is written to.
	smallOutput = 64 << 10
	// ExecOutputReserve is what each of an exec's stdout and stderr keeps
	// of MaxExecOutput however much the other wrote.
	ExecOutputReserve = smallOutput
	// NoteRoom is the capacity a large CappedBuffer has past its limit,
	// so that a short note (ExecSync's "command timed out") can be
	// appended to what it kept without copying it.
	NoteRoom = 128
)

// CappedBuffer is an io.Writer that keeps the first bytes written to it,
// up to a limit it may share with another buffer (an exec's stdout and
// stderr, see ExecOutput), and discards the rest, so a runaway child
// cannot grow the daemon. It never fails a write: a child blocked on a
// full pipe would hang. It is written by one goroutine at a time.
type CappedBuffer struct {
	limit     *outputLimit
	buf       []byte
	large     bool // buf may grow past smallOutput
	truncated bool // bytes were discarded
}

// outputLimit is the number of bytes one or more CappedBuffers may still
// keep past their own reserve, and the permission for them to grow past
// smallOutput.
type outputLimit struct {
	// reserve is what each buffer keeps of its own, before it takes from
	// left: an exec's stderr keeps its error message after stdout used up
	// the rest.
	reserve int

	mu   sync.Mutex
	left int // guarded by mu

	// acquire, when set, is asked once before the first buffer grows past
	// smallOutput; false keeps the buffers small.
	acquire func() bool
	once    sync.Once
	large   bool // set by once
}

// take reserves up to n bytes and returns how many it reserved.
func (l *outputLimit) take(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, l.left)
	l.left -= n
	return n
}

func (l *outputLimit) remaining() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left
}

// allowLarge reports whether buffers may grow past smallOutput, asking
// acquire the first time. A second caller waits for the first's answer.
func (l *outputLimit) allowLarge() bool {
	if l.acquire == nil {
		return true
	}
	l.once.Do(func() { l.large = l.acquire() })
	return l.large
}

// NewCappedBuffer returns a CappedBuffer that keeps max bytes.
func NewCappedBuffer(max int) *CappedBuffer {
	return &CappedBuffer{limit: &outputLimit{left: max}}
}

func (b *CappedBuffer) Write(p []byte) (int, error) {
	if b.limit == nil {
		b.truncated = b.truncated || len(p) > 0
		return len(p), nil
	}
	n := min(len(p), max(0, b.limit.reserve-len(b.buf)))
	if rest := len(p) - n; rest > 0 {
		if !b.large && len(b.buf)+len(p) > smallOutput {
			b.large = b.limit.allowLarge()
			if !b.large {
				rest = min(rest, max(0, smallOutput-len(b.buf)-n))
			}
		}
		n += b.limit.take(rest)
	}
	if n > 0 {
		if len(b.buf)+n > cap(b.buf) {
			b.grow(n)
		}
		b.buf = append(b.buf, p[:n]...)
	}
	if n < len(p) {
		b.truncated = true
	}
	return len(p), nil
}

// grow makes room for n more bytes: by doubling up to smallOutput, and
// past it once, to the most the buffer can hold.
func (b *CappedBuffer) grow(n int) {
	need := len(b.buf) + n
	size := min(max(need, 2*cap(b.buf), 512), smallOutput)
	if need > smallOutput {
		// What the limit still allows is all this buffer can gain.
		size = need + b.limit.remaining() + NoteRoom
	}
	buf := make([]byte, len(b.buf), size)
	copy(buf, b.buf)
	b.buf = buf
}

// Bytes returns what was kept.
func (b *CappedBuffer) Bytes() []byte { return b.buf }

// Truncated reports whether anything was discarded.
func (b *CappedBuffer) Truncated() bool { return b.truncated }

// ExecOutput collects the output of one exec: Stdout and Stderr keep
// MaxExecOutput bytes between them. Each is sure of its first
// ExecOutputReserve bytes; the rest is shared, in the order the two
// streams are read. Past ExecOutputReserve the output waits for a slot of
// its OutputGate, if it has one.
type ExecOutput struct {
	Stdout, Stderr *CappedBuffer

	gate     *OutputGate
	stop     chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	held     bool // guarded by mu: a slot of gate is held
	released bool // guarded by mu
}

// NewExecOutput returns an ExecOutput whose large output takes a slot of
// g; a nil g bounds nothing but the size.
func NewExecOutput(g *OutputGate) *ExecOutput {
	o := &ExecOutput{gate: g, stop: make(chan struct{})}
	limit := &outputLimit{reserve: ExecOutputReserve, left: MaxExecOutput - 2*ExecOutputReserve}
	if g != nil {
		limit.acquire = o.acquire
	}
	o.Stdout, o.Stderr = &CappedBuffer{limit: limit}, &CappedBuffer{limit: limit}
	return o
}

func (o *ExecOutput) acquire() bool {
	select {
	case o.gate.slots <- struct{}{}:
	case <-o.stop:
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.released {
		<-o.gate.slots
		return false
	}
	o.held = true
	return true
}

// Stop ends a wait for the gate, and any later one: the output stays
// small. The reader of the exec's output calls it when it stops waiting
// for the output.
func (o *ExecOutput) Stop() { o.stopOnce.Do(func() { close(o.stop) }) }

// Release gives back the gate's slot once the output is no longer needed;
// the owner of the output calls it, after which the bytes must not be
// used.
func (o *ExecOutput) Release() {
	o.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held {
		<-o.gate.slots
		o.held = false
	}
	o.released = true
}

// Result fills in res's output from o.
func (o *ExecOutput) Result(res *ExecResult) {
	res.Stdout, res.StdoutTruncated = o.Stdout.Bytes(), o.Stdout.Truncated()
	res.Stderr, res.StderrTruncated = o.Stderr.Bytes(), o.Stderr.Truncated()
}

// OutputGate bounds how many execs may hold more than a small output at
// once, daemon-wide, and so the memory ExecSync takes: at most its size
// times MaxExecOutput, plus a small buffer per exec. An exec past the
// small size waits for a slot while its process blocks on a full pipe,
// until a slot is free or its reader gives up (Stop: its timeout, or its
// context); each exec takes at most one slot and a holder never waits for
// another, so waiting cannot deadlock.
type OutputGate struct{ slots chan struct{} }

// NewOutputGate returns a gate of n slots.
func NewOutputGate(n int) *OutputGate { return &OutputGate{slots: make(chan struct{}, n)} }
