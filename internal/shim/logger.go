package shim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// The CRI container log format (k8s.io/cri-api, "kubelet-cri-logging"):
//
//	<RFC 3339 time with nanoseconds> <stdout|stderr> <F|P> <content>\n
//
// F marks the end of a line of the container's output, P a part of one
// that continues in the next entry of the same stream. The rules follow
// containerd's CRI logger, containerd's internal/cri/io/logger.go: a "\r\n" ending
// counts as "\n"; a line longer than maxLogLineSize is cut into P entries
// of that size; output that ends without a newline is written as a P
// entry.
const (
	// maxLogLineSize is containerd's default max_container_log_line_size.
	maxLogLineSize = 16 << 10
	tagFull        = 'F'
	tagPartial     = 'P'
	logFileMode    = 0o640
)

// logFile is one container's CRI log file, shared by the copies of its
// stdout and stderr. Each entry is written with one write(2), so entries
// of the two streams do not mix.
type logFile struct {
	path string
	now  func() time.Time

	mu     sync.Mutex
	f      *os.File // guarded by mu; nil when not open
	closed bool     // guarded by mu
	buf    []byte   // guarded by mu
}

// openLogFile opens (creates, appends to) the log file at path; "" makes
// a log that discards everything.
func openLogFile(path string) (*logFile, error) {
	l := &logFile{path: path, now: time.Now}
	if path == "" {
		return l, nil
	}
	f, err := openLogPath(path)
	if err != nil {
		return nil, err
	}
	l.f = f
	return l, nil
}

// unopenedLogFile is a log for path that drops entries until reopen
// succeeds: after a restart that could not open the file.
func unopenedLogFile(path string) *logFile {
	return &logFile{path: path, now: time.Now}
}

func openLogPath(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, logFileMode)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open log file: directory %s is gone: %w", filepath.Dir(path), errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("open log file: %w", err)
	}
	return f, nil
}

// write writes one entry.
func (l *logFile) write(stream string, tag byte, content []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	b := l.now().AppendFormat(l.buf[:0], time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, stream...)
	b = append(b, ' ', tag, ' ')
	b = append(b, content...)
	b = append(b, '\n')
	l.buf = b
	_, err := l.f.Write(b)
	return err
}

// reopen opens the log path anew, for the kubelet's rotation (it renames
// the file away, then asks for a new one). Until the new file is open the
// old one is kept, so a failed reopen loses nothing.
func (l *logFile) reopen() error {
	if l.path == "" {
		return nil
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return fmt.Errorf("log file closed: %w", errdefs.ErrFailedPrecondition)
	}
	f, err := openLogPath(l.path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		f.Close()
		return fmt.Errorf("log file closed: %w", errdefs.ErrFailedPrecondition)
	}
	old := l.f
	l.f = f
	l.mu.Unlock()
	if old == nil {
		return nil
	}
	return old.Close()
}

// close closes the file; later entries are dropped.
func (l *logFile) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// lineWriter turns one output stream into log entries. It is not safe for
// concurrent use; each stream has its own.
type lineWriter struct {
	log    *logFile
	stream string
	maxLen int
	// pending is the start of a line whose end has not arrived yet.
	pending []byte
	// err is the first failure to write the log, for the caller to
	// report once; writing goes on, the container's output is drained
	// whatever happens.
	err error
}

func newLineWriter(l *logFile, stream string) *lineWriter {
	return &lineWriter{log: l, stream: stream, maxLen: maxLogLineSize}
}

// Write never fails: see err.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.pending = append(w.pending, p...)
			w.emitLong(true)
			break
		}
		w.pending = append(w.pending, p[:i]...)
		p = p[i+1:]
		if k := len(w.pending); k > 0 && w.pending[k-1] == '\r' {
			w.pending = w.pending[:k-1]
		}
		w.emitLong(false)
		w.emit(tagFull, w.pending)
		w.pending = w.pending[:0]
	}
	return n, nil
}

// emitLong writes full-size P entries while pending holds more than fits
// one entry. open says that the line's end has not been seen: then a
// final "\r" is kept back, in case "\n" follows.
func (w *lineWriter) emitLong(open bool) {
	start := 0
	for {
		rest := w.pending[start:]
		if len(rest) <= w.maxLen || (open && len(rest) == w.maxLen+1 && rest[w.maxLen] == '\r') {
			break
		}
		w.emit(tagPartial, rest[:w.maxLen])
		start += w.maxLen
	}
	if start > 0 {
		w.pending = w.pending[:copy(w.pending, w.pending[start:])]
	}
}

// flush writes what is pending as a P entry: at the end of the output, or
// when copying stops for a restart (the line's rest then follows in the
// next entry, which the kubelet joins to it).
func (w *lineWriter) flush() {
	if len(w.pending) > 0 {
		w.emit(tagPartial, w.pending)
		w.pending = w.pending[:0]
	}
}

func (w *lineWriter) emit(tag byte, content []byte) {
	if err := w.log.write(w.stream, tag, content); err != nil && w.err == nil {
		w.err = err
	}
}
