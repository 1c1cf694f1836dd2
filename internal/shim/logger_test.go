package shim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

var testClock = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

const testStamp = "2026-01-02T03:04:05.000000006Z"

func newTestLog(t *testing.T) (*logFile, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	l, err := openLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.close() })
	l.now = func() time.Time { return testClock }
	return l, path
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLineWriter(t *testing.T) {
	const max = 8
	for _, tc := range []struct {
		name   string
		writes []string
		want   []string // "<tag> <content>" per entry
	}{
		{"one line", []string{"hello\n"}, []string{"F hello"}},
		{"two lines in one write", []string{"a\nb\n"}, []string{"F a", "F b"}},
		{"line across writes", []string{"hel", "lo", "\n"}, []string{"F hello"}},
		{"empty line", []string{"\n"}, []string{"F "}},
		{"crlf", []string{"dos\r\n"}, []string{"F dos"}},
		{"cr across writes", []string{"dos\r", "\n"}, []string{"F dos"}},
		{"lone cr kept", []string{"a\rb\n"}, []string{"F a\rb"}},
		{"unterminated end", []string{"abc"}, []string{"P abc"}},
		{"exactly max", []string{"12345678\n"}, []string{"F 12345678"}},
		{"exactly max with crlf", []string{"12345678\r\n"}, []string{"F 12345678"}},
		{"max plus one", []string{"123456789\n"}, []string{"P 12345678", "F 9"}},
		{"twice max", []string{"1234567812345678\n"}, []string{"P 12345678", "F 12345678"}},
		{"long line in pieces", []string{"12345", "678901234", "5678901\n"}, []string{"P 12345678", "P 90123456", "F 78901"}},
		{"long unterminated", []string{"1234567890"}, []string{"P 12345678", "P 90"}},
		{"long then short", []string{"123456789abc\nxy\n"}, []string{"P 12345678", "F 9abc", "F xy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, path := newTestLog(t)
			w := newLineWriter(l, "stdout")
			w.maxLen = max
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			w.flush()
			var want strings.Builder
			for _, e := range tc.want {
				want.WriteString(testStamp + " stdout " + e + "\n")
			}
			if got := readLog(t, path); got != want.String() {
				t.Errorf("log =\n%q\nwant\n%q", got, want.String())
			}
		})
	}
}

func TestLineWriterStreamsShareFile(t *testing.T) {
	l, path := newTestLog(t)
	out, errw := newLineWriter(l, "stdout"), newLineWriter(l, "stderr")
	_, _ = out.Write([]byte("par"))
	_, _ = errw.Write([]byte("oops\n"))
	_, _ = out.Write([]byte("tial\n"))
	want := testStamp + " stderr F oops\n" + testStamp + " stdout F partial\n"
	if got := readLog(t, path); got != want {
		t.Errorf("log =\n%q\nwant\n%q", got, want)
	}
}

func TestLineWriterDefaultMax(t *testing.T) {
	l, path := newTestLog(t)
	w := newLineWriter(l, "stdout")
	line := strings.Repeat("x", maxLogLineSize+10)
	_, _ = w.Write([]byte(line + "\n"))
	want := testStamp + " stdout P " + line[:maxLogLineSize] + "\n" + testStamp + " stdout F " + line[maxLogLineSize:] + "\n"
	if got := readLog(t, path); got != want {
		t.Errorf("a line of %d bytes was not cut at %d", len(line), maxLogLineSize)
	}
}

func TestLogFileReopen(t *testing.T) {
	l, path := newTestLog(t)
	w := newLineWriter(l, "stdout")
	_, _ = w.Write([]byte("before\n"))
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("between\n")) // still the old file
	if err := l.reopen(); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	_, _ = w.Write([]byte("after\n"))
	if got, want := readLog(t, rotated), testStamp+" stdout F before\n"+testStamp+" stdout F between\n"; got != want {
		t.Errorf("rotated file = %q, want %q", got, want)
	}
	if got, want := readLog(t, path), testStamp+" stdout F after\n"; got != want {
		t.Errorf("new file = %q, want %q", got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != logFileMode&^currentUmask() {
		t.Errorf("new file mode %v, want %v", fi.Mode().Perm(), os.FileMode(logFileMode))
	}

	// A directory that is gone: the reopen fails and the old file stays.
	if err := os.RemoveAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	if err := l.reopen(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("reopen in a removed directory = %v, want ErrFailedPrecondition", err)
	}
	if err := l.write("stdout", tagFull, []byte("x")); err != nil {
		t.Errorf("write after a failed reopen: %v", err)
	}

	// After close, nothing to reopen.
	l.close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.reopen(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("reopen after close = %v, want ErrFailedPrecondition", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reopen after close left a file: %v", err)
	}
}

func TestLogFileDiscard(t *testing.T) {
	l, err := openLogFile("")
	if err != nil {
		t.Fatal(err)
	}
	w := newLineWriter(l, "stdout")
	_, _ = w.Write([]byte("nowhere\n"))
	if w.err != nil || l.reopen() != nil || l.close() != nil {
		t.Error("a log without a path failed")
	}
}

func currentUmask() os.FileMode {
	dir, err := os.MkdirTemp("", "umask")
	if err != nil {
		return 0
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o777); err != nil {
		return 0
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return 0o777 &^ fi.Mode().Perm()
}
