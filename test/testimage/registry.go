package testimage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultAddr is where a Registry listens unless told otherwise: a free
// loopback port.
const DefaultAddr = "127.0.0.1:0"

// shutdownTimeout bounds how long Close waits for requests in flight.
const shutdownTimeout = 5 * time.Second

// Options configure a Registry. The zero value is a registry on a free
// loopback port, without auth, that copies DefaultBusybox and logs nothing.
type Options struct {
	// Addr is the TCP address to listen on; DefaultAddr when empty. The
	// registry speaks plain HTTP: clients must treat it as insecure, which
	// go-containerregistry and containers/image do for loopback addresses.
	Addr string
	// Busybox is the static busybox the images are built from;
	// DefaultBusybox when empty. Ignored when Builder is set.
	Busybox string
	// Builder, when set, builds the images Push pushes. Registries that
	// share a Builder build each base layer once between them.
	Builder *Builder
	// Username and Password, when Username is set, are required as HTTP
	// basic auth on every request, /v2/ included. A request without them,
	// or with others, gets 401 and `WWW-Authenticate: Basic realm=...`.
	// Push is not affected.
	Username, Password string
	// Logger receives one debug record per request; nil discards them.
	Logger *slog.Logger
}

// Fault is a failure the registry injects into blob downloads (GET
// /v2/<name>/blobs/<digest>). Manifests, HEAD requests and Push are never
// affected.
type Fault int

const (
	// NoFault serves blobs normally.
	NoFault Fault = iota
	// FailBlobs answers every blob GET with 500 and a distribution-spec
	// error body.
	FailBlobs
	// StallBlobs holds every blob GET, sending nothing, until the fault is
	// switched off (the GET then proceeds under the new fault), the client
	// gives up, or the registry is closed (the connection is then dropped).
	StallBlobs
	// StallMidBlob sends every blob GET's status, headers and the first
	// half of the body, then holds the rest as StallBlobs holds the whole:
	// until the fault is switched off (the rest is then sent), the client
	// gives up, or the registry is closed (the connection is dropped).
	StallMidBlob
)

func (f Fault) String() string {
	switch f {
	case NoFault:
		return "none"
	case FailBlobs:
		return "fail-blobs"
	case StallBlobs:
		return "stall-blobs"
	case StallMidBlob:
		return "stall-mid-blob"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Stats count the requests clients made; Push's own requests are not
// counted.
type Stats struct {
	ManifestGets int64 // GETs of a manifest or index, by tag or digest
	BlobGets     int64 // GETs of a blob, faulted ones included
	Unauthorized int64 // requests refused for missing or wrong credentials
	Stalled      int64 // blob GETs held by StallBlobs or StallMidBlob right now
}

// Registry is an in-process OCI distribution registry
// (go-containerregistry's pkg/registry, in memory) serving plain HTTP, with
// optional basic auth and switchable faults. Its methods are safe for
// concurrent use.
type Registry struct {
	addr    string
	opts    Options
	builder *Builder
	inner   http.Handler // the registry proper, without auth or faults
	srv     *http.Server

	serveDone chan struct{} // closed when Serve returned
	serveErr  error         // set before serveDone is closed

	closed    chan struct{} // closed by Close; aborts stalled GETs
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	fault   Fault         // guarded by mu
	release chan struct{} // guarded by mu; closed when StallBlobs is switched off

	manifestGets, blobGets, unauthorized, stalled atomic.Int64
}

// Start listens on opts.Addr and serves the registry until Close. ctx bounds
// the listen only, not the registry's life.
func Start(ctx context.Context, opts Options) (*Registry, error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	builder := opts.Builder
	if builder == nil {
		builder = NewBuilder(opts.Busybox)
	}
	r := &Registry{
		addr:      ln.Addr().String(),
		opts:      opts,
		builder:   builder,
		inner:     registry.New(registry.Logger(slog.NewLogLogger(logger.Handler(), slog.LevelDebug))),
		serveDone: make(chan struct{}),
		closed:    make(chan struct{}),
	}
	r.srv = &http.Server{
		Handler:           http.HandlerFunc(r.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(r.serveDone)
		if err := r.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			r.serveErr = fmt.Errorf("serve registry: %w", err)
		}
	}()
	return r, nil
}

// StartTest starts a registry for the test t and closes it when t ends. It
// fails t if the registry cannot start or did not close cleanly.
func StartTest(t testing.TB, opts Options) *Registry {
	t.Helper()
	r, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close registry: %v", err)
		}
	})
	return r
}

// Addr is the registry's host:port, such as "127.0.0.1:39017".
func (r *Registry) Addr() string { return r.addr }

// Reference prefixes a repository reference ("test/busybox:latest",
// "test/busybox@sha256:...") with the registry's address.
func (r *Registry) Reference(repoRef string) string { return r.addr + "/" + repoRef }

// Builder is the builder Push uses, for callers that want an image's digest
// or content without pushing it.
func (r *Registry) Builder() *Builder { return r.builder }

// Push builds spec and stores it under each of its tags (or by digest only,
// without tags), and returns the digest of the image's manifest or, for
// several platforms, of the index. Pushing again overwrites the tags. Push
// bypasses auth and faults: it writes to the registry in process.
func (r *Registry) Push(ctx context.Context, spec Spec) (v1.Hash, error) {
	select {
	case <-r.closed:
		return v1.Hash{}, fmt.Errorf("push %s: registry closed", spec.Repository)
	default:
	}
	a, err := r.builder.Build(ctx, spec)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("push: %w", err)
	}
	digest, err := a.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: digest: %w", spec.Repository, err)
	}
	p := pusher{h: r.inner, repo: spec.Repository}
	if err := p.push(ctx, a, digest, spec.Tags); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", spec.Repository, err)
	}
	return digest, nil
}

func (f Fault) stalls() bool { return f == StallBlobs || f == StallMidBlob }

// SetFault switches the fault injected into blob GETs from now on. Switching
// StallBlobs or StallMidBlob off releases the GETs it holds.
func (r *Registry) SetFault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fault == f {
		return
	}
	if r.fault.stalls() {
		close(r.release)
		r.release = nil
	}
	if f.stalls() {
		r.release = make(chan struct{})
	}
	r.fault = f
}

// Fault returns the fault in force.
func (r *Registry) Fault() Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fault
}

// Stats returns the request counts so far.
func (r *Registry) Stats() Stats {
	return Stats{
		ManifestGets: r.manifestGets.Load(),
		BlobGets:     r.blobGets.Load(),
		Unauthorized: r.unauthorized.Load(),
		Stalled:      r.stalled.Load(),
	}
}

// Close drops stalled blob GETs, waits a bounded time for other requests in
// flight, and stops serving. It returns the error that stopped serving
// early, if any. Calling it again returns the same result.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		close(r.closed)
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := r.srv.Shutdown(ctx); err != nil {
			// Requests still running after the timeout: cut them off.
			_ = r.srv.Close()
		}
		<-r.serveDone
		r.closeErr = r.serveErr
	})
	return r.closeErr
}
