package server

import (
	"context"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/sandbox"
)

// watchExit marks a ready sandbox NOTREADY when its pause process exits, so
// the kubelet sees a dead pod and recreates it. The pod's teardown ends the
// watch (sandbox.EndExitWatch) before it deletes the pause container. A
// sandbox without a process has no exit to watch: only Stop ends it.
func (s *Server) watchExit(sb *sandbox.Sandbox, ctl podsandbox.Controller) {
	if ctl.Traits().NeverExits {
		return
	}
	ctx := sb.WatchExit(log.With(s.ctx, "pod", sb.ID))
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		st, err := ctl.Wait(ctx, sb.ID)
		if err != nil {
			if ctx.Err() == nil {
				log.G(ctx).Warn("wait for sandbox container", "err", err)
			}
			return
		}
		// Serialise with Stop and Remove, which change the state themselves.
		sb.OpMu.Lock()
		defer sb.OpMu.Unlock()
		if !s.index.Has(sb.ID) || sb.Phase() != sandbox.PhaseReady {
			return
		}
		if _, err := s.advance(sb, (*sandbox.Record).MarkExited); err != nil {
			log.G(ctx).Error("persist sandbox exit", "err", err)
		}
		log.G(ctx).Warn("sandbox container exited", "exitCode", st.Code)
	}()
}

// markNotReady is used by recovery for a ready pod found dead.
func (s *Server) markNotReady(ctx context.Context, sb *sandbox.Sandbox, why string) {
	if _, err := s.advance(sb, (*sandbox.Record).MarkExited); err != nil {
		log.G(ctx).Error("persist sandbox state", "err", err)
	}
	log.G(ctx).Warn("sandbox is not ready after restart", "reason", why)
}
