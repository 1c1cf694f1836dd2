package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/events"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/nameindex"
	"github.com/podbay/podbay/internal/sandbox"
)

// The container events of the kubelet's evented PLEG (GetContainerEvents).
//
// A container has CREATED when CreateContainer publishes it, STARTED when
// StartContainer (or recovery) finds it running, STOPPED when it exits —
// stopped, exited by itself, failed to start, or found exited after a
// restart — and DELETED when RemoveContainer has removed it. A sandbox has
// the same four with its own ID as container_id, as containerd 2 sends
// them: CREATED and STARTED when RunPodSandbox publishes it, STOPPED when
// it stops being READY (its pause process exited, or StopPodSandbox or
// RemovePodSandbox began), once, and DELETED when RemovePodSandbox has
// removed it. Each event is published after the change is persisted and
// carries the pod's PodSandboxStatus and the ContainerStatus of each of its
// containers at that moment, what the Status RPCs answer then (the kubelet
// builds the pod's status from them and drops an event without a sandbox
// status). A container's events are published in the order of its changes:
// each change and its event happen under the container's EventMu (the
// sandbox's under its OpMu).

// containerEventBuffer is how many events a subscriber may fall behind
// before it is dropped: the capacity of the kubelet's own event channel.
const containerEventBuffer = events.DefaultBuffer

// eventBroadcaster carries the events to the GetContainerEvents streams.
type eventBroadcaster = events.Broadcaster[*runtimeapi.ContainerEventResponse]

func newEventBroadcaster(m *metrics.ContainerEvents) *eventBroadcaster {
	return events.New[*runtimeapi.ContainerEventResponse](events.Options{
		Buffer:        containerEventBuffer,
		OnDrop:        m.Dropped,
		OnSubscribers: m.Subscribers,
	})
}

// GetContainerEvents streams container and sandbox events from the moment
// it is called. A subscriber that falls containerEventBuffer events behind
// is dropped: its stream ends with ResourceExhausted after the events it
// was sent, none missing before them (the kubelet then relists and
// subscribes again). Daemon shutdown ends the streams with OK.
func (s *Server) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) (err error) {
	const method = "GetContainerEvents"
	ctx := log.With(stream.Context(), "rpc", method)
	start := time.Now()
	defer func() {
		err = errdefs.ToGRPC(err)
		code := errdefs.Code(err)
		s.metrics.ObserveRPC(method, code.String(), time.Since(start))
		log.G(ctx).Info("container event stream ended", "code", code.String(), "err", err, "duration", time.Since(start))
	}()
	sub, err := s.events.Subscribe()
	if err != nil {
		return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable) // shutting down
	}
	defer sub.Cancel()
	log.G(ctx).Info("container event stream started")
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				if err := sub.Err(); errors.Is(err, events.ErrOverflow) {
					return fmt.Errorf("more than %d container events behind: %w: %w", containerEventBuffer, err, errdefs.ErrResourceExhausted)
				}
				return nil // the daemon is shutting down
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// publishEvent publishes an event of type typ for containerID (the
// sandbox's ID for the sandbox's own events) in pod sandboxID. sb, when
// set, is that pod, whose status is taken from it when it is no longer
// published (its DELETED event).
func (s *Server) publishEvent(ctx context.Context, sandboxID string, sb *sandbox.Sandbox, containerID string, typ runtimeapi.ContainerEventType) {
	if s.events.Subscribers() == 0 {
		// Nobody listens (a kubelet without the EventedPLEG gate): the
		// statuses, an image lookup per container, are not worth making.
		return
	}
	// What the Status RPCs answer, on a context the request's end does
	// not cut short.
	ctx = context.WithoutCancel(ctx)
	ev := &runtimeapi.ContainerEventResponse{
		ContainerId:        containerID,
		ContainerEventType: typ,
		CreatedAt:          time.Now().UnixNano(),
		ContainersStatuses: []*runtimeapi.ContainerStatus{},
	}
	if resp, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID}); err == nil {
		ev.PodSandboxStatus = resp.GetStatus()
	} else if sb != nil {
		ev.PodSandboxStatus = sandboxStatus(sb.Record())
	} else {
		// A container whose pod is gone (recovery removing it): the
		// kubelet ignores such an event, as it does containerd's.
		log.G(ctx).Debug("container event without its pod's status", "pod", sandboxID, "err", err)
	}
	for _, c := range s.containers.InSandbox(sandboxID) {
		resp, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ID})
		if err != nil {
			if !errdefs.IsNotFound(err) {
				log.G(ctx).Warn("container status for an event", "container", c.ID, "err", err)
			}
			continue
		}
		ev.ContainersStatuses = append(ev.ContainersStatuses, resp.GetStatus())
	}
	s.events.Publish(ev)
	s.eventMetrics.Published(typ.String())
}

// publishContainerEvent publishes an event of c; the caller holds
// c.EventMu and has persisted the change.
func (s *Server) publishContainerEvent(ctx context.Context, c *container.Container, typ runtimeapi.ContainerEventType) {
	s.publishEvent(ctx, c.SandboxID, nil, c.ID, typ)
}

// publishSandboxEvent publishes an event of sb itself; the caller holds
// sb.OpMu and has persisted the change.
func (s *Server) publishSandboxEvent(ctx context.Context, sb *sandbox.Sandbox, typ runtimeapi.ContainerEventType) {
	s.publishEvent(ctx, sb.ID, sb, sb.ID, typ)
}

// finishSandbox ends RunPodSandbox's reservation of name (nameindex
// Finish) and, for a pod made, publishes its CREATED and STARTED events —
// and STOPPED if it is no longer ready. sb.OpMu is held from publication
// to the events, so no later event of the pod comes before them.
func (s *Server) finishSandbox(ctx context.Context, name string, p *nameindex.Pending, sb *sandbox.Sandbox, err error) {
	if err != nil {
		s.index.Finish(name, p, sb, err)
		return
	}
	sb.OpMu.Lock()
	defer sb.OpMu.Unlock()
	s.index.Finish(name, p, sb, nil)
	s.publishSandboxEvent(ctx, sb, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	s.publishSandboxEvent(ctx, sb, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if sb.Phase() != sandbox.PhaseReady {
		s.publishSandboxEvent(ctx, sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
}

// finishContainer ends CreateContainer's reservation of name and, for a
// container made, publishes its CREATED event, under c.EventMu from
// publication on.
func (s *Server) finishContainer(ctx context.Context, name string, p *nameindex.Pending, c *container.Container, err error) {
	if err != nil {
		s.containers.Finish(name, p, c, err)
		return
	}
	c.EventMu.Lock()
	defer c.EventMu.Unlock()
	s.containers.Finish(name, p, c, nil)
	s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
}

// sandboxAdvanced publishes the STOPPED event of a published pod whose
// phase left ready (advance); the caller holds sb.OpMu.
func (s *Server) sandboxAdvanced(sb *sandbox.Sandbox, before sandbox.Phase, rec sandbox.Record) {
	if before != sandbox.PhaseReady || rec.Phase == sandbox.PhaseReady || !s.index.Has(sb.ID) {
		return
	}
	s.publishSandboxEvent(log.With(s.ctx, "pod", sb.ID), sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
}
