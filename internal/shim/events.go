package shim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	eventsapi "github.com/containerd/containerd/api/events"
	ttrpcevents "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// maxSocketPath is the longest path a unix socket address holds
// (sun_path, less its terminating NUL).
const maxSocketPath = 107

// eventServer serves the events service the shims publish to
// (containerd.services.events.ttrpc.v1.Events, Forward), on the socket
// they are given as TTRPC_ADDRESS. A shim that cannot reach it (the
// daemon is down) retries and then drops the event.
type eventServer struct {
	srv  *ttrpc.Server
	l    net.Listener
	done chan struct{}
}

// serveEvents serves the events socket at path, handing every event to
// handle.
func serveEvents(path string, handle func(context.Context, *types.Envelope)) (*eventServer, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("events socket path %s is longer than %d bytes: choose a shorter state directory", path, maxSocketPath)
	}
	// A socket left by a daemon that was killed.
	if err := removeIfExists(path); err != nil {
		return nil, err
	}
	srv, err := ttrpc.NewServer(ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()))
	if err != nil {
		return nil, err
	}
	ttrpcevents.RegisterEventsService(srv, forwarder(handle))
	l, err := net.Listen("unix", path)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("listen on events socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		srv.Close()
		return nil, err
	}
	s := &eventServer{srv: srv, l: l, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := srv.Serve(context.Background(), l); err != nil && !errors.Is(err, ttrpc.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			log.G(context.Background()).Error("events server", "socket", filepath.Base(path), "err", err)
		}
	}()
	return s, nil
}

// close stops serving and removes the socket.
func (s *eventServer) close() error {
	err := s.srv.Close()
	<-s.done
	if errors.Is(err, ttrpc.ErrServerClosed) {
		err = nil
	}
	return err
}

type forwarder func(context.Context, *types.Envelope)

func (f forwarder) Forward(ctx context.Context, req *ttrpcevents.ForwardRequest) (*emptypb.Empty, error) {
	if req.GetEnvelope() != nil {
		f(ctx, req.GetEnvelope())
	}
	return &emptypb.Empty{}, nil
}

// handleEvent acts on a shim's event: a TaskOOM marks the container
// OOM-killed, in memory and by creating <bundle>/oom; a TaskExit lets the exit watcher know that the events
// before it (the TaskOOM) have been handled. Everything else is ignored:
// exits are learnt through Wait.
func (r *Runtime) handleEvent(_ context.Context, env *types.Envelope) {
	if env.GetNamespace() != "" && env.GetNamespace() != r.cfg.Namespace {
		return
	}
	ev, err := env.GetEvent().UnmarshalNew()
	if err != nil {
		log.G(r.ctx).Debug("undecodable shim event", "topic", env.GetTopic(), "type", env.GetEvent().GetTypeUrl(), "err", err)
		return
	}
	switch ev := ev.(type) {
	case *eventsapi.TaskOOM:
		c := r.eventContainer(ev.GetContainerID())
		if c == nil {
			return
		}
		c.oomKilled.Store(true)
		// The marker keeps the OOM kill for a Runtime that takes over
		// before the exit is recorded.
		if err := os.WriteFile(filepath.Join(c.rec.Bundle, runtime.OOMMarker), nil, 0o600); err != nil {
			log.G(r.ctx).Warn("record OOM kill", "id", c.id, "err", err)
			return
		}
		log.G(r.ctx).Info("container OOM-killed", "id", c.id)
	case *eventsapi.TaskExit:
		// The init process's exit (an exec's has its own ID).
		if c := r.eventContainer(ev.GetContainerID()); c != nil && ev.GetID() == c.id {
			c.sawExitEvent()
		}
	}
}

func (r *Runtime) eventContainer(id string) *container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.containers[id]
}
