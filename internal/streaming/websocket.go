package streaming

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"path"
	"sync"
	"time"

	sremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/podbay/podbay/internal/log"
)

// WebSocket v5 (v5.channel.k8s.io, what `crictl --transport websocket`
// and client-go's WebSocket executor speak). The kubelet's streaming
// server (k8s.io/cri-streaming v0.37) serves exec and attach over SPDY
// and over the WebSocket protocols up to v4 only. A v5 session is
// translated here, as the API server's stream translator does: the
// WebSocket side is opened with wsstream (which knows v5's CLOSE
// signal, a half-close of stdin), and the session is run as a SPDY
// client of the same server over an in-process pipe, so the token is
// consumed and checked by the kubelet's code and the session is the
// same as any other.

// v5Protocol is the WebSocket subprotocol translated here.
const v5Protocol = sremotecommand.StreamProtocolV5Name

// tokenTTL is how long the options of a session handed out by GetExec or
// GetAttach are kept for a v5 client: the kubelet's request cache TTL.
const tokenTTL = time.Minute

// maxTokens bounds the remembered options (the kubelet's cache holds at
// most 1000 requests in flight).
const maxTokens = 1000

// sessionOpts are the streams a session was asked for: the WebSocket
// side must open the same ones the kubelet's server expects.
type sessionOpts struct {
	stdin, stdout, stderr, tty bool
	at                         time.Time
}

// tokens remembers the options of recent sessions by their URL's token.
type tokens struct {
	mu sync.Mutex
	m  map[string]sessionOpts // guarded by mu
}

func (t *tokens) put(rawURL string, o sessionOpts) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]sessionOpts{}
	}
	now := time.Now()
	for k, v := range t.m {
		if now.Sub(v.at) > tokenTTL {
			delete(t.m, k)
		}
	}
	if len(t.m) >= maxTokens {
		return // the kubelet's cache refuses as many; v5 falls back to 404
	}
	o.at = now
	t.m[path.Base(u.Path)] = o
}

func (t *tokens) take(token string) (sessionOpts, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.m[token]
	delete(t.m, token)
	if ok && time.Since(o.at) > tokenTTL {
		return o, false
	}
	return o, ok
}

// isV5 reports whether r asks for an exec or attach over WebSocket v5,
// which serveV5 must translate.
func isV5(r *http.Request) bool {
	kind := sessionKind(r.URL.Path)
	if (kind != "exec" && kind != "attach") || !wsstream.IsWebSocketRequest(r) {
		return false
	}
	for _, p := range r.Header.Values("Sec-Websocket-Protocol") {
		for _, one := range splitProtocols(p) {
			if one == v5Protocol {
				return true
			}
		}
	}
	return false
}

func splitProtocols(h string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == ',' {
			p := h[start:i]
			for len(p) > 0 && (p[0] == ' ' || p[0] == '\t') {
				p = p[1:]
			}
			for len(p) > 0 && (p[len(p)-1] == ' ' || p[len(p)-1] == '\t') {
				p = p[:len(p)-1]
			}
			out = append(out, p)
			start = i + 1
		}
	}
	return out
}

// serveV5 runs a v5 exec or attach session: WebSocket with the client,
// SPDY with the kubelet's server over the in-process listener.
func (s *Server) serveV5(w http.ResponseWriter, r *http.Request) {
	o, ok := s.tokens.take(path.Base(r.URL.Path))
	if !ok {
		http.NotFound(w, r)
		return
	}
	channels := make([]wsstream.ChannelType, 5)
	channels[sremotecommand.StreamStdIn] = pick(o.stdin, wsstream.ReadChannel)
	channels[sremotecommand.StreamStdOut] = pick(o.stdout, wsstream.WriteChannel)
	channels[sremotecommand.StreamStdErr] = pick(o.stderr, wsstream.WriteChannel)
	channels[sremotecommand.StreamErr] = wsstream.WriteChannel
	channels[sremotecommand.StreamResize] = wsstream.ReadChannel
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		v5Protocol: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(s.idleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		log.G(r.Context()).Warn("websocket v5 upgrade failed", "err", err)
		return
	}
	defer conn.Close()
	// As the kubelet's server does: an empty message on the lowest
	// writable channel tells the client the session is open.
	switch {
	case o.stdout:
		_, _ = streams[sremotecommand.StreamStdOut].Write(nil)
	case o.stderr:
		_, _ = streams[sremotecommand.StreamStdErr].Write(nil)
	default:
		_, _ = streams[sremotecommand.StreamErr].Write(nil)
	}

	opts := execOpts{tty: o.tty}
	if o.stdin {
		opts.stdin = streams[sremotecommand.StreamStdIn]
	}
	if o.stdout {
		opts.stdout = streams[sremotecommand.StreamStdOut]
	}
	if o.stderr {
		opts.stderr = streams[sremotecommand.StreamStdErr]
	}
	if o.tty {
		opts.resize = &sizeQueue{dec: json.NewDecoder(streams[sremotecommand.StreamResize])}
	}
	err = s.runSPDY(r.Context(), r.URL.Path, opts)
	if werr := writeStatus(streams[sremotecommand.StreamErr], err); werr != nil {
		log.G(r.Context()).Debug("websocket v5: writing the status", "err", werr)
	}
}

func pick(on bool, t wsstream.ChannelType) wsstream.ChannelType {
	if on {
		return t
	}
	return wsstream.IgnoreChannel
}

// pipeListener is an in-process listener: dial returns one end of a
// pipe whose other end Accept returns.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.ch <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "podbay-inproc" }
