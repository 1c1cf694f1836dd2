package runtime

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

func TestCappedBuffer(t *testing.T) {
	b := NewCappedBuffer(5)
	for _, s := range []string{"abc", "de"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = (%d, %v)", n, err)
		}
	}
	if b.Truncated() {
		t.Error("Truncated with exactly max bytes written")
	}
	for _, s := range []string{"f", "ghi"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = (%d, %v)", n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" {
		t.Errorf("Bytes = %q, want %q", got, "abcde")
	}
	if !b.Truncated() {
		t.Error("not Truncated after writing past max")
	}
	var empty CappedBuffer
	_, _ = empty.Write(nil)
	if empty.Truncated() {
		t.Error("empty write truncated")
	}
}

// TestCappedBufferGrowsOnce: past the small size a buffer moves once into
// an allocation that holds everything it can keep, plus NoteRoom; it is
// never copied again, and keeps the bytes in order.
func TestCappedBufferGrowsOnce(t *testing.T) {
	const max = 1 << 20
	b := NewCappedBuffer(max)
	chunk := make([]byte, 32<<10)
	var want bytes.Buffer
	var moves int
	lastCap := 0
	for i := 0; want.Len() < max+len(chunk); i++ {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		_, _ = b.Write(chunk)
		want.Write(chunk)
		if c := cap(b.Bytes()); c != lastCap {
			if lastCap >= smallOutput || c > smallOutput {
				moves++
			}
			lastCap = c
		}
	}
	if moves != 1 {
		t.Errorf("the buffer moved %d times past %d bytes, want once", moves, smallOutput)
	}
	if got := cap(b.Bytes()); got != max+NoteRoom {
		t.Errorf("large buffer's capacity %d, want %d", got, max+NoteRoom)
	}
	if !bytes.Equal(b.Bytes(), want.Bytes()[:max]) || !b.Truncated() {
		t.Errorf("kept %d bytes (truncated %v), not the first %d written", len(b.Bytes()), b.Truncated(), max)
	}
}

// TestCappedBufferAllocations: filling a buffer to a 16 MiB limit
// allocates little more than the limit (growing by append allocated
// about five times as much).
func TestCappedBufferAllocations(t *testing.T) {
	chunk := make([]byte, 32<<10)
	allocs := testing.Benchmark(func(tb *testing.B) {
		tb.ReportAllocs()
		for range tb.N {
			b := NewCappedBuffer(MaxExecOutput)
			for range MaxExecOutput/len(chunk) + 2 {
				_, _ = b.Write(chunk)
			}
		}
	})
	perOp := allocs.AllocedBytesPerOp()
	if perOp > MaxExecOutput+2*smallOutput+NoteRoom {
		t.Errorf("filling a buffer of %d bytes allocated %d bytes", MaxExecOutput, perOp)
	}
}

// TestExecOutputShared: stdout and stderr keep MaxExecOutput bytes between
// them, and each keeps its first ExecOutputReserve bytes however much the
// other wrote.
func TestExecOutputShared(t *testing.T) {
	flood := make([]byte, MaxExecOutput+1)
	o := NewExecOutput(nil)
	_, _ = o.Stdout.Write(flood)
	_, _ = o.Stderr.Write([]byte("error\n"))
	var res ExecResult
	o.Result(&res)
	if len(res.Stdout) != MaxExecOutput-ExecOutputReserve || !res.StdoutTruncated || string(res.Stderr) != "error\n" || res.StderrTruncated {
		t.Errorf("stdout %d bytes (truncated %v), stderr %q (truncated %v)", len(res.Stdout), res.StdoutTruncated, res.Stderr, res.StderrTruncated)
	}
	// The note ExecSync adds on timeout fits without moving the output.
	before := &res.Stdout[0]
	if s := append(res.Stdout, "command timed out after 9223372036854775807s\n"...); &s[0] != before {
		t.Error("appending a note copied the output")
	}

	o = NewExecOutput(nil)
	_, _ = o.Stdout.Write(flood[:100])
	_, _ = o.Stderr.Write(flood)
	_, _ = o.Stdout.Write(flood)
	o.Result(&res)
	if len(res.Stdout)+len(res.Stderr) != MaxExecOutput || len(res.Stdout) != ExecOutputReserve || !res.StdoutTruncated || !res.StderrTruncated {
		t.Errorf("both flooding: stdout %d bytes (truncated %v), stderr %d (truncated %v); want %d in all",
			len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated, MaxExecOutput)
	}
}

// TestOutputGate: an exec past the small size waits for a slot; its
// stdout and stderr take one slot between them; Stop ends the wait, and
// the output then stays small; Release frees the slot for a waiter.
func TestOutputGate(t *testing.T) {
	g := NewOutputGate(1)
	chunk := make([]byte, smallOutput+1)

	first := NewExecOutput(g)
	_, _ = first.Stdout.Write(chunk)
	_, _ = first.Stderr.Write(chunk) // the same exec: no second slot
	if len(first.Stdout.Bytes()) != len(chunk) || len(first.Stderr.Bytes()) != len(chunk) {
		t.Fatalf("first exec kept %d and %d bytes", len(first.Stdout.Bytes()), len(first.Stderr.Bytes()))
	}

	second := NewExecOutput(g)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = second.Stdout.Write(chunk)
	}()
	select {
	case <-wrote:
		t.Fatal("a second large output did not wait for the gate")
	case <-time.After(50 * time.Millisecond):
	}
	first.Release()
	<-wrote
	if len(second.Stdout.Bytes()) != len(chunk) {
		t.Errorf("after the release the second exec kept %d bytes, want %d", len(second.Stdout.Bytes()), len(chunk))
	}

	// The slot is the second's now: a third waits, until it stops.
	third := NewExecOutput(g)
	var wg sync.WaitGroup
	for _, b := range []*CappedBuffer{third.Stdout, third.Stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = b.Write(chunk)
		}()
	}
	time.Sleep(20 * time.Millisecond)
	third.Stop()
	wg.Wait()
	for _, b := range []*CappedBuffer{third.Stdout, third.Stderr} {
		if len(b.Bytes()) != smallOutput || !b.Truncated() {
			t.Errorf("a stopped exec kept %d bytes (truncated %v), want %d", len(b.Bytes()), b.Truncated(), smallOutput)
		}
	}
	third.Release()
	second.Release()
	second.Release() // twice is harmless
	if n := len(g.slots); n != 0 {
		t.Errorf("%d slots held after every release", n)
	}
}
