package streaming

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	sremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// The SPDY client side of a translated v5 session: remotecommand's v4
// protocol, as client-go's SPDY executor speaks it (an error stream, then
// stdin, stdout, stderr and resize as asked; stdin half-closed at its end;
// the session ends when stdout and stderr have ended and the error stream
// has told the outcome). It is written here rather than taken from
// client-go: client-go's executor brought k8s.io/api/core/v1, client-go's
// REST machinery and their YAML and CBOR codecs into podbayd, about 5 MB
// of binary and so of resident memory, for these few streams.

// execOpts are a session's streams on the WebSocket side.
type execOpts struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	tty            bool
	resize         *sizeQueue // with tty only
}

// exitCodeError is a session whose command exited non-zero.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", e.code)
}

// streamStatus is the outcome on the error stream of protocols v4 and v5:
// metav1.Status's fields that remotecommand uses, as the kubelet's
// streaming server writes them.
type streamStatus struct {
	Status  string         `json:"status,omitempty"`
	Message string         `json:"message,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Details *statusDetails `json:"details,omitempty"`
	Code    int32          `json:"code,omitempty"`
}

type statusDetails struct {
	Causes []statusCause `json:"causes,omitempty"`
}

type statusCause struct {
	Type    string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

const (
	statusSuccess = "Success"
	statusFailure = "Failure"
)

// termSize is remotecommand's resize message (client-go's TerminalSize:
// no JSON tags, so the keys are Width and Height).
type termSize struct {
	Width  uint16
	Height uint16
}

// runSPDY runs the session at p as a SPDY client over the in-process
// listener and returns its outcome: nil, an exitCodeError or the error.
func (s *Server) runSPDY(ctx context.Context, p string, o execOpts) error {
	rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{
		UpgradeTransport: &http.Transport{DialContext: s.inproc.dial},
		PingPeriod:       5 * time.Second,
	})
	if err != nil {
		return err
	}
	u := &url.URL{Scheme: "http", Host: "podbay-inproc", Path: p}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Add(httpstream.HeaderProtocolVersion, sremotecommand.StreamProtocolV4Name)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return fmt.Errorf("error sending request: %w", err)
	}
	defer resp.Body.Close()
	conn, err := rt.NewConnection(resp)
	if err != nil {
		return err
	}
	defer conn.Close()
	if got := resp.Header.Get(httpstream.HeaderProtocolVersion); got != sremotecommand.StreamProtocolV4Name {
		return fmt.Errorf("streaming server negotiated protocol %q, want %s", got, sremotecommand.StreamProtocolV4Name)
	}

	done := make(chan error, 1)
	go func() { done <- streamV4(conn, o) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// streamV4 creates the session's streams on conn and copies them.
func streamV4(conn httpstream.Connection, o execOpts) error {
	create := func(kind string) (httpstream.Stream, error) {
		h := http.Header{}
		h.Set(sremotecommand.StreamType, kind)
		return conn.CreateStream(h)
	}
	errStream, err := create(sremotecommand.StreamTypeError)
	if err != nil {
		return err
	}
	var stdin, stdout, stderr, resize httpstream.Stream
	if o.stdin != nil {
		if stdin, err = create(sremotecommand.StreamTypeStdin); err != nil {
			return err
		}
	}
	if o.stdout != nil {
		if stdout, err = create(sremotecommand.StreamTypeStdout); err != nil {
			return err
		}
	}
	if o.stderr != nil && !o.tty {
		if stderr, err = create(sremotecommand.StreamTypeStderr); err != nil {
			return err
		}
	}
	if o.tty {
		if resize, err = create(sremotecommand.StreamTypeResize); err != nil {
			return err
		}
	}

	outcome := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			outcome <- fmt.Errorf("error reading from error stream: %w", err)
		case len(msg) > 0:
			outcome <- decodeStatus(msg)
		default:
			outcome <- nil
		}
	}()
	if resize != nil && o.resize != nil {
		go func() {
			enc := json.NewEncoder(resize)
			for {
				sz := o.resize.Next()
				if sz == nil {
					return
				}
				if enc.Encode(sz) != nil {
					return
				}
			}
		}()
	}
	if stdin != nil {
		// Half-close stdin once the client's ends, or once the server
		// closes it (the process went).
		var once sync.Once
		closeStdin := func() { once.Do(func() { stdin.Close() }) }
		go func() {
			defer closeStdin()
			_, _ = io.Copy(stdin, o.stdin)
		}()
		go func() {
			defer closeStdin()
			_, _ = io.Copy(io.Discard, stdin)
		}()
	}
	var wg sync.WaitGroup
	copyOut := func(w io.Writer, r io.Reader) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := io.Copy(w, r); err != nil {
				_, _ = io.Copy(io.Discard, r)
			}
		}()
	}
	if stdout != nil {
		copyOut(o.stdout, stdout)
	}
	if stderr != nil {
		copyOut(o.stderr, stderr)
	}
	wg.Wait()
	return <-outcome
}

// decodeStatus turns the error stream's status into the session's
// outcome, as client-go's v4 decoder does.
func decodeStatus(msg []byte) error {
	var st streamStatus
	if err := json.Unmarshal(msg, &st); err != nil {
		return fmt.Errorf("error stream protocol error: %v in %q", err, string(msg))
	}
	switch st.Status {
	case statusSuccess:
		return nil
	case statusFailure:
		if st.Reason != sremotecommand.NonZeroExitCodeReason {
			return errors.New(st.Message)
		}
		if st.Details != nil {
			for _, c := range st.Details.Causes {
				if c.Type != sremotecommand.ExitCodeCauseType {
					continue
				}
				rc, err := strconv.ParseUint(c.Message, 10, 8)
				if err != nil {
					return fmt.Errorf("error stream protocol error: invalid exit code value %q", c.Message)
				}
				return exitCodeError{code: int(rc)}
			}
		}
		return fmt.Errorf("error stream protocol error: no %s cause given", sremotecommand.ExitCodeCauseType)
	default:
		return errors.New("error stream protocol error: unknown error")
	}
}

// writeStatus writes the v4/v5 status of a finished session: Success, or
// the exit code as NonZeroExitCode, or the error's text.
func writeStatus(w io.Writer, err error) error {
	st := streamStatus{Status: statusSuccess}
	var ce exitCodeError
	switch {
	case err == nil:
	case errors.As(err, &ce):
		st = streamStatus{
			Status:  statusFailure,
			Reason:  sremotecommand.NonZeroExitCodeReason,
			Message: err.Error(),
			Details: &statusDetails{Causes: []statusCause{{
				Type: sremotecommand.ExitCodeCauseType, Message: strconv.Itoa(ce.code),
			}}},
		}
	default:
		st = streamStatus{Status: statusFailure, Message: err.Error()}
	}
	b, merr := json.Marshal(st)
	if merr != nil {
		return merr
	}
	_, werr := w.Write(b)
	return werr
}

// sizeQueue reads the resize channel's JSON sizes.
type sizeQueue struct{ dec *json.Decoder }

// Next returns the next size, nil once the channel ends.
func (q *sizeQueue) Next() *termSize {
	var sz termSize
	if err := q.dec.Decode(&sz); err != nil {
		return nil
	}
	return &sz
}
