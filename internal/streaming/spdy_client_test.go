package streaming

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// oneSize is a TerminalSizeQueue that sends one size, then ends.
type oneSize struct {
	sent bool
	sz   remotecommand.TerminalSize
}

func (q *oneSize) Next() *remotecommand.TerminalSize {
	if q.sent {
		return nil
	}
	q.sent = true
	return &q.sz
}

// TestWebSocketV5TTY: a TTY session over v5 (client-go's WebSocket
// executor) reaches the runtime with its terminal size: the resize
// channel is translated onto the SPDY session's resize stream.
func TestWebSocketV5TTY(t *testing.T) {
	s := startServer(t, newFakeRuntime())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"size"}, Tty: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &stdout, Tty: true, TerminalSizeQueue: &oneSize{sz: remotecommand.TerminalSize{Width: 132, Height: 43}}}
	if err := wsStream(ctx, &rest.Config{}, resp.Url, opts); err != nil {
		t.Fatalf("tty exec over websocket v5: %v", err)
	}
	if got := strings.TrimSpace(strings.ReplaceAll(stdout.String(), "\r", "")); got != "132x43" {
		t.Errorf("the runtime saw size %q, want 132x43", got)
	}
}

// TestStatusRoundTrip: the statuses writeStatus writes are what
// decodeStatus (and so client-go's v4/v5 decoder, whose rules it follows)
// reads back; a malformed status is a protocol error.
func TestStatusRoundTrip(t *testing.T) {
	for _, in := range []error{nil, exitCodeError{code: 7}, errors.New("no such container")} {
		var b bytes.Buffer
		if err := writeStatus(&b, in); err != nil {
			t.Fatal(err)
		}
		out := decodeStatus(b.Bytes())
		switch {
		case in == nil && out != nil:
			t.Errorf("success read back as %v (%s)", out, b.String())
		case in != nil && (out == nil || out.Error() != in.Error()):
			t.Errorf("%v read back as %v (%s)", in, out, b.String())
		}
		var ce exitCodeError
		if errors.As(in, &ce) && (!errors.As(out, &ce) || ce.code != 7) {
			t.Errorf("exit code 7 read back as %v", out)
		}
	}
	for _, bad := range []string{`{`, `{"status":"Failure","reason":"NonZeroExitCode"}`,
		`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}`, `{"status":"Weird"}`} {
		if err := decodeStatus([]byte(bad)); err == nil || !strings.Contains(err.Error(), "protocol error") {
			t.Errorf("status %s: %v, want a protocol error", bad, err)
		}
	}
}
