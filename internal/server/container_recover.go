package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/oci"
	"github.com/podbay/podbay/internal/store"
)

// recoverContainers reloads container records after the sandboxes: a
// container caught half-way through creation is undone, a removal is
// finished, a container whose sandbox is gone is removed, and exits that
// happened while the daemon was down are recorded with conmon's exit code
// and time. It returns the IDs that own root filesystems.
func (s *Server) recoverContainers(ctx context.Context) map[string]bool {
	owned := map[string]bool{}
	var recs []container.Record
	bad, err := s.db.ForEach(containerBucket, func(r store.Record) error {
		var rec container.Record
		if r.Version != container.RecordVersion {
			return fmt.Errorf("version %d: %w", r.Version, store.ErrBadRecord)
		}
		if err := json.Unmarshal(r.Data, &rec); err != nil || rec.ID != r.Key {
			return fmt.Errorf("decode: %v: %w", err, store.ErrBadRecord)
		}
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		log.G(ctx).Error("load container records", "err", err)
	}
	for _, k := range bad {
		log.G(ctx).Error("quarantined unreadable container record", "container", k)
	}
	for _, rec := range recs {
		ctx := log.With(ctx, "container", rec.ID)
		c := container.New(rec)
		if rec.State == container.StateCreating {
			if err := s.undoContainerCreating(ctx, rec); err != nil {
				log.G(ctx).Error("undo half-made container", "err", err)
				owned[rec.ID] = true
			}
			continue
		}
		owned[rec.ID] = true
		s.containers.Add(c)
		if rec.Removing || !s.index.Has(rec.SandboxID) {
			c.OpMu.Lock()
			if err := s.removeContainerLocked(ctx, c); err != nil {
				log.G(ctx).Error("finish removal of container", "err", err)
			} else {
				delete(owned, rec.ID)
			}
			c.OpMu.Unlock()
			continue
		}
		s.reconcileContainer(ctx, c)
	}
	return owned
}

// reconcileContainer brings a container's state up to date with the host.
func (s *Server) reconcileContainer(ctx context.Context, c *container.Container) {
	rec := c.Record()
	if rec.State != container.StateRunning && rec.State != container.StateCreated {
		return
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
		s.recordExit(ctx, c, oci.ExitStatus{Code: 255, ExitedAt: time.Now()})
	case st.Status == oci.StatusRunning:
		if rec.State == container.StateRunning {
			s.watchContainerExit(c, rt)
		}
	case st.Status == oci.StatusStopped && rec.State == container.StateRunning:
		s.recordExit(ctx, c, oci.ExitStatus{Code: 255, ExitedAt: time.Now()})
	}
}

// undoContainerCreating releases what an interrupted CreateContainer took,
// stopping at the first failure.
func (s *Server) undoContainerCreating(ctx context.Context, rec container.Record) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if rec.RuntimeCreated {
		rt, err := s.runtimeForContainer(rec)
		if err == nil {
			err = rt.Delete(ctx, rec.ID)
		} else {
			// The pod is gone, and its runtime with it: try every handler.
			for _, r := range s.runtimes {
				if err = r.Delete(ctx, rec.ID); err != nil {
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("delete runtime container: %w", err)
		}
	}
	if err := s.images.RemoveRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("remove container root filesystem: %w", err)
	}
	if err := os.RemoveAll(rec.Dir); err != nil {
		return fmt.Errorf("remove container dir: %w", err)
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
