package server

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// StartContainer starts a created container.
func (s *Server) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.OpMu.Lock()
	defer c.OpMu.Unlock()
	rec := c.Record()
	if rec.State != container.StateCreated {
		return nil, fmt.Errorf("container %s is %s, not created: %w", c.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	sb, err := s.index.Get(rec.SandboxID)
	if err != nil {
		return nil, fmt.Errorf("container's pod: %w", err)
	}
	rt, err := s.runtimeFor(sb.Record().RuntimeHandler)
	if err != nil {
		return nil, err
	}
	// Stamped before Start: the process may run and exit (and conmon
	// write its exit time) before Start returns.
	started := time.Now()
	timer := s.metrics.StartContainer(ctx, "start")
	if err := s.hit(ctx, "container.starting"); err != nil {
		return nil, err
	}
	if err := s.nriStartContainer(ctx, c); err != nil {
		return nil, err
	}
	parentOOMKills := s.parentOOMKills(rec)
	if err := s.startOrRestore(ctx, rt, c); err != nil {
		// The runtime leaves a container that failed to start stopped;
		// report it as exited with the error, as containerd does.
		c.EventMu.Lock()
		defer c.EventMu.Unlock()
		rec = c.Update(func(r *container.Record) {
			r.State = container.StateExited
			r.FinishedAt = time.Now()
			r.ExitCode = 128
			r.Reason = container.ReasonError
			r.Message = err.Error()
		})
		s.saveContainerOrLog(ctx, rec)
		s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		return nil, fmt.Errorf("start container: %w", err)
	}
	timer.Phase("runtime_start")
	if err := s.hit(ctx, "container.start"); err != nil {
		return nil, err
	}
	c.EventMu.Lock()
	rec = c.Update(func(r *container.Record) {
		r.StartedAt = started
		r.ParentOOMKills = parentOOMKills
		if r.State == container.StateCreated {
			r.State = container.StateRunning
		}
	})
	err = s.saveContainer(rec)
	s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	c.EventMu.Unlock()
	// Watched once persisted (the exit, persisted too, must come after),
	// and whether or not that worked: the process runs.
	s.watchContainerExit(c, rt)
	if err != nil {
		return nil, err
	}
	timer.Phase("persist")
	log.G(ctx).Info("container started")
	s.nriPostStartContainer(ctx, c)
	return &runtimeapi.StartContainerResponse{}, nil
}
