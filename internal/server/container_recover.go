package server

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// recoverContainerLocked brings a container reloaded after a restart up to
// date; the caller holds c.OpMu. A removal a crash interrupted is finished,
// a container whose pod is gone is removed, and an exit that happened while
// the daemon was down is recorded with its monitor's exit code and time.
func (s *Server) recoverContainerLocked(ctx context.Context, c *container.Container) {
	rec := c.Record()
	if rec.Removing || !s.index.Has(rec.SandboxID) {
		if err := s.removeContainerLocked(ctx, c); err != nil {
			log.G(ctx).Error("finish removal of container; will retry", "err", err)
			s.finishContainerRemoval(c)
		}
		return
	}
	s.reconcileContainer(ctx, c)
}

// finishContainerRemoval retries, in the background, the removal of a
// container recovery could not remove, until it is gone (a RemoveContainer
// may remove it meanwhile).
func (s *Server) finishContainerRemoval(c *container.Container) {
	s.retryInBackground(log.With(s.ctx, "container", c.ID), "container removal", func(ctx context.Context) (bool, error) {
		c.OpMu.Lock()
		defer c.OpMu.Unlock()
		if !s.containers.Has(c.ID) {
			return true, nil
		}
		return false, s.removeContainerLocked(ctx, c)
	})
}

// recoverCreatingContainer undoes a container a crash caught half-way
// through CreateContainer, and keeps retrying in the background if that
// fails.
func (s *Server) recoverCreatingContainer(ctx context.Context, rec container.Record) {
	ctx = log.With(ctx, "container", rec.ID)
	if err := s.undoContainerCreating(ctx, rec); err != nil {
		log.G(ctx).Error("undo half-made container; will retry", "err", err)
		s.finishContainerUndo(rec.ID)
	}
}

// reconcileContainer brings a container's state up to date with the host.
func (s *Server) reconcileContainer(ctx context.Context, c *container.Container) {
	rec := c.Record()
	if rec.State != container.StateRunning && rec.State != container.StateCreated {
		return
	}
	if rec.State == container.StateCreated && rec.RestoreFrom != "" && !rec.RuntimeCreated {
		return // created from a checkpoint: StartContainer restores it
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		log.G(ctx).Error("container's runtime", "err", err)
		return
	}
	if st, exited, err := rt.Exited(c.ID); err == nil && exited {
		s.recordExit(ctx, c, st)
		return
	}
	st, err := rt.State(ctx, c.ID)
	switch {
	case err != nil:
		// The runtime does not know it (a reboot): it is gone, exit unknown.
		c.Update(func(r *container.Record) { r.Message = "container not found after restart" })
		s.recordExit(ctx, c, runtime.ExitStatus{Code: 255, ExitedAt: time.Now()})
	case st.Status == runtime.StatusRunning:
		if rec.State == container.StateCreated {
			// A StartContainer the crash cut short after the runtime
			// started the process: it runs, so the record says so (and
			// a retried StartContainer is refused, not run again). The
			// start time is lost; now is the closest we know.
			c.EventMu.Lock()
			rec = c.Update(func(r *container.Record) {
				r.State = container.StateRunning
				r.StartedAt = time.Now()
			})
			s.saveContainerOrLog(ctx, rec)
			s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
			c.EventMu.Unlock()
			log.G(ctx).Info("container found running though its start was not recorded")
		}
		s.watchContainerExit(c, rt)
	case st.Status == runtime.StatusStopped:
		// Running and gone without an exit status, or started and gone
		// before its start was recorded: either way it cannot run again.
		s.recordExit(ctx, c, runtime.ExitStatus{Code: 255, ExitedAt: time.Now()})
	}
}

// undoContainerCreating releases what an interrupted CreateContainer took,
// stopping at the first failure.
func (s *Server) undoContainerCreating(ctx context.Context, rec container.Record) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if rec.RuntimeCreated {
		if err := s.deleteFromRuntime(ctx, rec); err != nil {
			return fmt.Errorf("delete runtime container: %w", err)
		}
	}
	// Before the root filesystem, as in releaseContainer.
	if err := removeRecordDirs(rec.Dir, rec.BundleDir()); err != nil {
		return fmt.Errorf("remove container dir: %w", err)
	}
	if err := s.images.RemoveRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("remove container root filesystem: %w", err)
	}
	if err := s.releaseImageVolumes(ctx, rec.ID); err != nil {
		return err
	}
	return s.db.Delete(containerBucket, rec.ID)
}

// finishContainerUndo retries undoContainerCreating in the background for
// a container whose rollback failed.
func (s *Server) finishContainerUndo(id string) {
	s.retryInBackground(log.With(s.ctx, "container", id), "container rollback", func(ctx context.Context) (bool, error) {
		var rec container.Record
		if _, err := s.db.Get(containerBucket, id, &rec); err != nil {
			return true, nil
		}
		return false, s.undoContainerCreating(ctx, rec)
	})
}
