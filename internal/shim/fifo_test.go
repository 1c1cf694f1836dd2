package shim

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podbay/podbay/test/testbundle"
)

func newFifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fifo")
	if err := mkfifo(path); err != nil {
		t.Fatal(err)
	}
	return path
}

type readResult struct {
	data []byte
	err  error
}

// readAllAsync reads r to its end in the background.
func readAllAsync(r io.Reader) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- readResult{b, err}
	}()
	return ch
}

func TestFifoReaderWaitsForFirstWriter(t *testing.T) {
	path := newFifo(t)
	r, err := openFifoReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAllAsync(r)
	select {
	case res := <-got:
		t.Fatalf("read ended before any writer came: %q, %v", res.data, res.err)
	case <-time.After(100 * time.Millisecond):
	}
	// A blocking open for writing goes through: there is a reader.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case res := <-got:
		if res.err != nil || string(res.data) != "hello world" {
			t.Fatalf("read %q, %v", res.data, res.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no end of file after the writer closed")
	}
}

func TestFifoReaderWriterFirst(t *testing.T) {
	// After a restart: the shim holds both ends and has written.
	path := newFifo(t)
	holder, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Write([]byte("while away\n")); err != nil {
		t.Fatal(err)
	}
	r, err := openFifoReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAllAsync(r)
	time.Sleep(50 * time.Millisecond)
	holder.Close()
	select {
	case res := <-got:
		if res.err != nil || string(res.data) != "while away\n" {
			t.Fatalf("read %q, %v", res.data, res.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no end of file after the writer closed")
	}
}

func TestFifoReaderClose(t *testing.T) {
	r, err := openFifoReader(newFifo(t))
	if err != nil {
		t.Fatal(err)
	}
	got := readAllAsync(r)
	time.Sleep(50 * time.Millisecond)
	r.Close()
	select {
	case res := <-got:
		if !isClosedRead(res.err) {
			t.Fatalf("read after Close: %v, want a closed error", res.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the read")
	}
}

func TestFifoReaderNotAFifo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := openFifoReader(path); err == nil {
		r.Close()
		t.Fatal("opened a regular file as a FIFO")
	}
	if w, err := openFifoWriter(path); err == nil {
		w.Close()
		t.Fatal("opened a regular file as a FIFO")
	}
}

func TestFifoWriter(t *testing.T) {
	path := newFifo(t)
	// No reader yet: the open does not block or fail.
	w, err := openFifoWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write([]byte("input")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "input" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	w.Close()
	if _, err := r.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the writer closed: %v, want EOF", err)
	}
}

func TestBroadcaster(t *testing.T) {
	b := newBroadcaster(context.Background(), "stdout")
	b.write([]byte("before"))
	var first, second testbundle.Buffer
	s1 := b.subscribe(&first)
	b.write([]byte("one "))
	s2 := b.subscribe(&second)
	b.write([]byte("two"))
	b.unsubscribe(s2)
	b.write([]byte(" three"))
	<-s2.done
	b.end()
	<-s1.done
	if got := first.String(); got != "one two three" {
		t.Errorf("first client got %q", got)
	}
	if got := second.String(); got != "two" {
		t.Errorf("second client got %q", got)
	}
	// After the end, a new client ends at once.
	late := b.subscribe(&first)
	select {
	case <-late.done:
	case <-time.After(5 * time.Second):
		t.Fatal("a client subscribed after the end did not end")
	}
	b.write([]byte("ignored"))
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct{ release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

func TestBroadcasterSlowClient(t *testing.T) {
	b := newBroadcaster(context.Background(), "stdout")
	slow := blockingWriter{release: make(chan struct{})}
	s := b.subscribe(slow)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range subscriberQueue * 4 {
			b.write([]byte("x"))
		}
	}()
	select {
	case <-done: // the stream went on without the client
	case <-time.After(5 * time.Second):
		t.Fatal("a client that does not read held up the stream")
	}
	close(slow.release)
	b.end()
	<-s.done
}

// waitFifoDrained returns once a reader has taken what was written, and
// not before.
func TestWaitFifoDrained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdin")
	if err := mkfifo(path); err != nil {
		t.Fatal(err)
	}
	w, err := openFifoWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("piped in\n")); err != nil {
		t.Fatal(err)
	}
	const readerDelay = 200 * time.Millisecond
	got := make(chan string, 1)
	go func() {
		time.Sleep(readerDelay)
		r, err := os.Open(path)
		if err != nil {
			got <- err.Error()
			return
		}
		defer r.Close()
		buf := make([]byte, 64)
		n, _ := r.Read(buf)
		got <- string(buf[:n])
	}()
	start := time.Now()
	waitFifoDrained(context.Background(), w)
	if d := time.Since(start); d < readerDelay || d > fifoDrainTimeout/2 {
		t.Errorf("waitFifoDrained returned after %v; the reader read after %v", d, readerDelay)
	}
	if s := <-got; s != "piped in\n" {
		t.Errorf("reader got %q", s)
	}
}
