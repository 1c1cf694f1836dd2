package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxMessageLen bounds a runtime message quoted in an error. The cause
// tends to be at the start of runc's output and the summary at the end, so
// longer messages lose their middle.
const maxMessageLen = 2048

// errNoSyncMessage means conmon closed the sync pipe without reporting:
// it died, or the runtime failed without writing anything to stderr.
var errNoSyncMessage = errors.New("conmon exited without reporting the container pid")

// syncMessage is what conmon writes on _OCI_SYNCPIPE once `runtime create`
// has finished: {"pid": N} (or {"data": N} with --api-version 1) on
// success, a pid of -1 and the runtime's stderr as "message" on failure.
// For a create the pipe then stays open, silent, until conmon exits.
type syncMessage struct {
	Pid     *int   `json:"pid"`
	Data    *int   `json:"data"`
	Message string `json:"message"`
}

// readSyncMessage reads the first message conmon writes on the sync pipe
// and returns the container's pid. A failure reported by conmon comes back
// as an error carrying the runtime's message.
func readSyncMessage(r io.Reader) (int, error) {
	var m syncMessage
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, errNoSyncMessage
		}
		return 0, fmt.Errorf("read conmon sync message: %w", err)
	}
	pid := -1
	switch {
	case m.Pid != nil:
		pid = *m.Pid
	case m.Data != nil:
		pid = *m.Data
	case m.Message == "":
		return 0, errors.New("conmon sync message has no pid")
	}
	if pid <= 0 {
		if m.Message == "" {
			return 0, fmt.Errorf("runtime create failed (conmon reported pid %d)", pid)
		}
		return 0, errors.New(runtimeMessage([]byte(m.Message)))
	}
	return pid, nil
}

// runtimeMessage turns a runtime's stderr into one line for an error.
// runc and other logrus users print `time="…" level=error msg="…"`; only
// the msg values are kept. Other lines are kept as they are.
func runtimeMessage(stderr []byte) string {
	var parts []string
	for line := range strings.SplitSeq(string(stderr), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if msg, ok := logrusMessage(line); ok {
			line = msg
		}
		if len(parts) > 0 && parts[len(parts)-1] == line {
			continue
		}
		parts = append(parts, line)
	}
	return truncateMiddle(strings.Join(parts, "; "), maxMessageLen)
}

// logrusMessage extracts msg from a logrus text-format line.
func logrusMessage(line string) (string, bool) {
	if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") {
		return "", false
	}
	_, rest, ok := strings.Cut(line, " msg=")
	if !ok {
		return "", false
	}
	if !strings.HasPrefix(rest, `"`) {
		msg, _, _ := strings.Cut(rest, " ")
		return msg, true
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", false
	}
	msg, err := strconv.Unquote(quoted)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(msg), true
}

// truncateMiddle shortens s to about n bytes by replacing its middle with
// " … ", without splitting a UTF-8 sequence.
func truncateMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = " … "
	keep := (n - len(ellipsis)) / 2
	head, tail := s[:keep], s[len(s)-keep:]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return head + ellipsis + tail
}
