// Package streaming serves the sessions behind the CRI's Exec, Attach and
// PortForward: the RPCs return a URL on this server, and the client
// (crictl, or the kubelet proxying kubectl) connects to it with SPDY or
// WebSocket. The protocol is the kubelet's own streaming server
// (k8s.io/cri-streaming/pkg/streaming); this package adds the lifecycle
// around it, tells a Runtime when a client has gone, translates the
// WebSocket protocol v5.channel.k8s.io (websocket.go) and serves TLS when
// configured.
//
// The kubelet's server passes each exec and attach the HTTP request's
// context, but once the connection is upgraded (hijacked) net/http no
// longer watches it, so that context would only end when the session
// does. Here every accepted connection is wrapped: when reading from it
// fails, the peer is gone, and the context of the request on it is
// cancelled. An exec then kills its process instead of leaving it
// running for nobody.
package streaming

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kstreaming "k8s.io/cri-streaming/pkg/streaming"

	"github.com/podbay/podbay/internal/log"
)

// Runtime runs the sessions: see k8s.io/cri-streaming/pkg/streaming. Exec
// and Attach get a context that ends when the client's connection is
// closed; PortForward over SPDY gets a context that never ends (the
// kubelet's code passes context.Background) and must notice the end of
// its stream instead, as Forward does.
type Runtime = kstreaming.Runtime

// DefaultIdleTimeout is how long a session may pass no data before it is
// closed, the kubelet's and containerd's default.
const DefaultIdleTimeout = 4 * time.Hour

// ErrClientGone is the cause of a session's context ending because its
// client's connection was closed.
var ErrClientGone = errors.New("streaming client disconnected")

// Config configures the server. The zero value is usable.
type Config struct {
	// IdleTimeout closes a session that passed no data for this long;
	// 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// BaseContext is the parent of every session's context, for its
	// logger; nil means context.Background.
	BaseContext context.Context
	// TLS, when set, makes the server serve HTTPS (and hand out https
	// URLs) with this config; see TLSConfig.
	TLS *tls.Config
}

// Server serves streaming sessions on one listener.
type Server struct {
	stream kstreaming.Server
	http   *http.Server
	l      net.Listener
	// inproc serves the SPDY side of WebSocket v5 sessions (websocket.go).
	inproc      *pipeListener
	tokens      tokens
	idleTimeout time.Duration

	mu       sync.Mutex
	conns    map[*trackedConn]struct{} // guarded by mu
	closed   bool                      // guarded by mu
	sessions sync.WaitGroup            // Add under mu while !closed
}

// New returns a server for rt on l, which it owns from now on. The URLs
// it hands out name l's address, so l should listen on an address the
// clients can reach (not 0.0.0.0).
func New(l net.Listener, rt Runtime, cfg Config) (*Server, error) {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	base := cfg.BaseContext
	if base == nil {
		base = context.Background()
	}
	kcfg := kstreaming.DefaultConfig
	kcfg.Addr = l.Addr().String()
	kcfg.BaseURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	if cfg.TLS != nil {
		kcfg.BaseURL.Scheme = "https"
	}
	kcfg.StreamIdleTimeout = cfg.IdleTimeout
	stream, err := kstreaming.NewServer(kcfg, rt)
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	s := &Server{stream: stream, conns: map[*trackedConn]struct{}{}, inproc: newPipeListener(), idleTimeout: cfg.IdleTimeout}
	if cfg.TLS != nil {
		// Tracked outside TLS: a failed handshake or read still ends
		// the session's context.
		l = tls.NewListener(l, cfg.TLS)
	}
	s.l = &trackedListener{Listener: l, s: s}
	s.http = &http.Server{
		Handler:           s.track(stream),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			tc, ok := c.(*trackedConn)
			if !ok {
				return ctx
			}
			ctx, cancel := context.WithCancelCause(ctx)
			tc.setCancel(cancel)
			return ctx
		},
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// GetExec validates req and returns the URL of its session.
func (s *Server) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	resp, err := s.stream.GetExec(req)
	if err == nil {
		s.tokens.put(resp.GetUrl(), sessionOpts{stdin: req.GetStdin(), stdout: req.GetStdout(), stderr: req.GetStderr(), tty: req.GetTty()})
	}
	return resp, err
}

// GetAttach validates req and returns the URL of its session.
func (s *Server) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	resp, err := s.stream.GetAttach(req)
	if err == nil {
		s.tokens.put(resp.GetUrl(), sessionOpts{stdin: req.GetStdin(), stdout: req.GetStdout(), stderr: req.GetStderr(), tty: req.GetTty()})
	}
	return resp, err
}

// GetPortForward validates req and returns the URL of its session.
func (s *Server) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return s.stream.GetPortForward(req)
}

// Serve serves until Shutdown, then returns nil.
func (s *Server) Serve() error {
	go func() { _ = s.http.Serve(&trackedListener{Listener: s.inproc, s: s}) }()
	if err := s.http.Serve(s.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting connections and closes every session's
// connection, which ends the sessions (an exec's process is killed),
// then waits until ctx ends for them to return.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Closes the listener and the connections net/http still owns; the
	// upgraded ones are closed below.
	err := s.http.Close()
	for _, c := range conns {
		c.Close()
	}
	done := make(chan struct{})
	go func() {
		s.sessions.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("streaming sessions still running: %w", ctx.Err())
	}
	return err
}

// track counts the sessions, so that Shutdown can wait for them.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		s.sessions.Add(1)
		s.mu.Unlock()
		defer s.sessions.Done()
		log.G(r.Context()).Debug("streaming session", "path", sessionKind(r.URL.Path), "remote", r.RemoteAddr)
		if isV5(r) {
			s.serveV5(w, r)
			return
		}
		if isTunnel(r) {
			s.serveTunnel(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// sessionKind is the first element of a session's path ("/exec/<token>"
// → "exec"); the token is a credential and is not logged.
func sessionKind(p string) string {
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			return p[1:i]
		}
	}
	return p
}

// trackedListener registers every accepted connection with the server.
type trackedListener struct {
	net.Listener
	s *Server
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: l.s}
	l.s.mu.Lock()
	closed := l.s.closed
	if !closed {
		l.s.conns[tc] = struct{}{}
	}
	l.s.mu.Unlock()
	if closed {
		c.Close()
		return nil, net.ErrClosed
	}
	return tc, nil
}

// trackedConn is a connection that cancels its requests' context once a
// read fails (the peer closed it, or it broke) or it is closed.
type trackedConn struct {
	net.Conn
	s *Server

	mu     sync.Mutex
	gone   bool                    // guarded by mu
	cancel context.CancelCauseFunc // guarded by mu
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	// net/http aborts its background read with a deadline in the past;
	// that is not the peer going away.
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.markGone()
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.markGone()
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

func (c *trackedConn) setCancel(cancel context.CancelCauseFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel = cancel
	if c.gone {
		cancel(ErrClientGone)
	}
}

func (c *trackedConn) markGone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone = true
	if c.cancel != nil {
		c.cancel(ErrClientGone)
	}
}
