package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// watchContainerExit records a running container's exit (code, time,
// reason) as soon as conmon reports it.
func (s *Server) watchContainerExit(c *container.Container, rt runtime.Runtime) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx := log.With(s.ctx, "container", c.ID)
		st, err := rt.Wait(ctx, c.ID)
		if err != nil {
			if s.ctx.Err() == nil {
				log.G(ctx).Warn("wait for container", "err", err)
			}
			return
		}
		s.recordExit(ctx, c, st)
	}()
}

// recordExit moves a container to exited with conmon's exit status, once,
// and publishes its STOPPED event.
func (s *Server) recordExit(ctx context.Context, c *container.Container, st runtime.ExitStatus) {
	rec, reason, changed, ok := s.persistExit(ctx, c, st)
	if !ok {
		return
	}
	s.stats.Forget(rec)
	log.G(ctx).Info("container exited", "exitCode", st.Code, "reason", reason)
	if changed {
		s.nriContainerStopped(ctx, c)
	}
}

// persistExit is recordExit's change of the record, under c.EventMu: ok is
// false when c had exited already, changed when this call made it exit.
func (s *Server) persistExit(ctx context.Context, c *container.Container, st runtime.ExitStatus) (rec container.Record, reason string, changed, ok bool) {
	c.EventMu.Lock()
	defer c.EventMu.Unlock()
	rec = c.Record()
	if rec.State == container.StateExited {
		return rec, "", false, false
	}
	reason = container.ReasonCompleted
	switch {
	case st.OOMKilled || s.oomKilled(rec.CgroupPath) || s.parentOOMKilled(c, rec, st.Code) ||
		s.scopeOOMKilled(ctx, rec.ID, st.Code):
		reason = container.ReasonOOMKilled
	case st.Code != 0:
		reason = container.ReasonError
	}
	rec = c.Update(func(r *container.Record) {
		if r.State == container.StateExited {
			return
		}
		changed = true
		r.State = container.StateExited
		r.ExitCode = st.Code
		r.FinishedAt = st.ExitedAt
		if !r.StartedAt.IsZero() && r.FinishedAt.Before(r.StartedAt) {
			// File times and our clock can disagree by a tick.
			r.FinishedAt = r.StartedAt
		}
		r.Reason = reason
	})
	s.saveContainerOrLog(ctx, rec)
	if changed {
		s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
	return rec, reason, changed, true
}

func (s *Server) oomKilled(cgroupPath string) bool {
	if s.cgroups == nil {
		return false
	}
	n, err := s.cgroups.OOMKills(cgroupPath)
	return err == nil && n > 0
}
