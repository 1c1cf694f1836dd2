package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/oci"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/store"
)

// Recover reloads the sandbox records and reconciles each against the host:
// a sandbox caught half-way through RunPodSandbox is undone, a removal
// caught half-way is finished, a pod whose process or namespace is gone is
// NOTREADY; then podbay-owned network namespaces and CNI attachments that no
// record owns are released. Recovery logs what it cannot fix and goes on: a
// daemon that refuses to start helps nobody.
func (s *Server) Recover(ctx context.Context) error {
	var recs []sandbox.Record
	bad, err := s.db.ForEach(sandboxBucket, func(r store.Record) error {
		if r.Version != sandbox.RecordVersion {
			return fmt.Errorf("version %d: %w", r.Version, store.ErrBadRecord)
		}
		var rec sandbox.Record
		if err := json.Unmarshal(r.Data, &rec); err != nil || rec.ID != r.Key {
			return fmt.Errorf("decode: %v: %w", err, store.ErrBadRecord)
		}
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return fmt.Errorf("load sandbox records: %w", err)
	}
	for _, k := range bad {
		log.G(ctx).Error("quarantined unreadable sandbox record", "pod", k)
	}

	// First publish what exists, so that containers can find their pods;
	// then the containers; then finish the sandbox operations a crash
	// interrupted (a resumed Stop must stop the pod's containers too).
	owned := map[string]bool{}
	var published []*sandbox.Sandbox
	for _, rec := range recs {
		ctx := log.With(ctx, "pod", rec.ID)
		if rec.State == sandbox.StateCreating {
			if err := s.undoCreating(ctx, rec); err != nil {
				// Keep the record so the next start tries again.
				log.G(ctx).Error("undo half-made sandbox", "err", err)
				owned[rec.ID] = true
			} else {
				log.G(ctx).Info("undid sandbox caught half-way through creation")
			}
			continue
		}
		owned[rec.ID] = true
		sb := sandbox.New(rec)
		s.index.Add(rec.Name, sb)
		published = append(published, sb)
	}
	for id := range s.recoverContainers(ctx) {
		owned[id] = true
	}
	for _, sb := range published {
		ctx := log.With(ctx, "pod", sb.ID)
		rec := sb.Record()
		switch {
		case rec.Removing:
			sb.OpMu.Lock()
			if err := s.removePodSandboxLocked(ctx, sb); err != nil {
				log.G(ctx).Error("finish removal of sandbox", "err", err)
			} else {
				delete(owned, rec.ID)
			}
			sb.OpMu.Unlock()
		case rec.Stopping:
			// A Stop interrupted by a crash: finish it (each step is
			// idempotent), so released IPs are not reported as the pod's.
			sb.OpMu.Lock()
			if err := s.stopPodSandboxLocked(ctx, sb); err != nil {
				log.G(ctx).Error("finish stop of sandbox", "err", err)
			}
			sb.OpMu.Unlock()
		default:
			s.reconcile(ctx, sb)
		}
	}
	s.collectGarbage(ctx, owned)
	return nil
}

// reconcile checks a published sandbox against the host.
func (s *Server) reconcile(ctx context.Context, sb *sandbox.Sandbox) {
	rec := sb.Record()
	if rec.State != sandbox.StateReady {
		return
	}
	rt, err := s.runtimeFor(rec.RuntimeHandler)
	if err != nil {
		s.markNotReady(ctx, sb, err.Error())
		return
	}
	st, err := rt.State(ctx, rec.ID)
	if err != nil || st.Status != oci.StatusRunning {
		why := fmt.Sprintf("sandbox container is %s", st.Status)
		if err != nil {
			why = err.Error()
		}
		s.markNotReady(ctx, sb, why)
		return
	}
	if rec.NetworkMode == sandbox.ModeCNI {
		if mounted, err := netns.IsMounted(rec.NetworkSettings.SandboxKey); err != nil || !mounted {
			s.markNotReady(ctx, sb, "network namespace is gone")
			return
		}
	}
	s.watchExit(sb, rt)
}

// undoCreating releases what a RunPodSandbox interrupted by a crash (or a
// failed rollback) took, in reverse order of acquisition, and stops at the
// first step that fails, so that what a retry needs (the pinned namespace
// for CNI DEL) is still there. Every step is idempotent.
func (s *Server) undoCreating(ctx context.Context, rec sandbox.Record) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if rec.ContainerCreated {
		rt, err := s.runtimeFor(rec.RuntimeHandler)
		if err != nil {
			return err
		}
		if err := rt.Delete(ctx, rec.ID); err != nil {
			return fmt.Errorf("delete sandbox container: %w", err)
		}
	}
	if rec.NetworkMode == sandbox.ModeCNI {
		if rec.NetworkSetup {
			if err := s.teardownNetwork(ctx, rec); err != nil {
				return err
			}
		}
		if err := netns.Remove(rec.NetworkSettings.SandboxKey); err != nil {
			return err
		}
	}
	if err := s.images.RemoveRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("remove sandbox root filesystem: %w", err)
	}
	if err := os.RemoveAll(rec.Dir); err != nil {
		return fmt.Errorf("remove sandbox dir: %w", err)
	}
	return s.db.Delete(sandboxBucket, rec.ID)
}

// undoRetryInterval spaces the attempts to finish a failed rollback.
const undoRetryInterval = 15 * time.Second

// finishUndo retries undoCreating for the record of a sandbox whose
// rollback failed. The name is free meanwhile: the kubelet's retry gets a
// new sandbox.
func (s *Server) finishUndo(id string) {
	s.retryInBackground(log.With(s.ctx, "pod", id), "sandbox rollback", func(ctx context.Context) (bool, error) {
		var rec sandbox.Record
		if _, err := s.db.Get(sandboxBucket, id, &rec); err != nil {
			return true, nil // gone, or unreadable: recovery handles it
		}
		return false, s.undoCreating(ctx, rec)
	})
}

// retryInBackground calls attempt every undoRetryInterval until it
// succeeds, reports there is nothing left to do, or the server stops (the
// next start picks up what is left from the records).
func (s *Server) retryInBackground(ctx context.Context, what string, attempt func(context.Context) (done bool, err error)) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTicker(undoRetryInterval)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
			done, err := attempt(ctx)
			if err != nil {
				log.G(ctx).Warn("finishing "+what+" failed; will retry", "err", err)
				continue
			}
			if !done {
				log.G(ctx).Info("finished " + what)
			}
			return
		}
	}()
}

// collectGarbage releases podbay-owned resources that no record owns: network
// namespaces named podbay-<id>, CNI attachments in podbay's private libcni
// cache (which hold IPAM reservations and host rules), root filesystems in
// podbay's storage, and sandbox dirs.
func (s *Server) collectGarbage(ctx context.Context, owned map[string]bool) {
	// CNI first: the bridge plugin finds what to release (its masquerade
	// rules) through the namespace, which must still be mounted.
	cached, err := s.network.Cached()
	if err != nil {
		log.G(ctx).Error("list cached CNI attachments", "err", err)
	}
	for _, c := range cached {
		if owned[c.ID] {
			continue
		}
		if err := s.network.TeardownCached(ctx, c); err != nil {
			log.G(ctx).Error("release orphaned CNI attachment", "pod", c.ID, "err", err)
		} else {
			log.G(ctx).Info("released orphaned CNI attachment", "pod", c.ID)
		}
	}

	ids, err := netns.List(s.cfg.NetNSDir)
	if err != nil {
		log.G(ctx).Error("list network namespaces", "err", err)
	}
	for _, id := range ids {
		if owned[id] || !isID(id) {
			continue
		}
		// A namespace a live process is in is not garbage: releasing the
		// mount frees nothing, and the process may belong to another
		// daemon sharing this dir (which is not supported, but must not
		// break running pods).
		path := netns.Path(s.cfg.NetNSDir, id)
		if inUse, err := netns.InUse(path); err != nil || inUse {
			log.G(ctx).Warn("not removing unowned network namespace that a process is in", "pod", id, "err", err)
			continue
		}
		if err := netns.Remove(path); err != nil {
			log.G(ctx).Error("remove orphaned network namespace", "pod", id, "err", err)
		} else {
			log.G(ctx).Info("removed orphaned network namespace", "pod", id)
		}
	}

	rootfses, err := s.images.Rootfses(ctx)
	if err != nil {
		log.G(ctx).Error("list root filesystems", "err", err)
	}
	for _, id := range rootfses {
		if owned[id] {
			continue
		}
		if err := s.images.RemoveRootfs(ctx, id); err != nil {
			log.G(ctx).Error("remove orphaned root filesystem", "pod", id, "err", err)
		} else {
			log.G(ctx).Info("removed orphaned root filesystem", "pod", id)
		}
	}

	dirs, _ := os.ReadDir(filepath.Join(s.cfg.Root, "sandboxes"))
	for _, d := range dirs {
		if !owned[d.Name()] {
			if err := os.RemoveAll(filepath.Join(s.cfg.Root, "sandboxes", d.Name())); err != nil {
				log.G(ctx).Error("remove orphaned sandbox dir", "pod", d.Name(), "err", err)
			}
		}
	}
}

// isID reports whether s has the shape of a podbay ID (64 hex digits), so
// that garbage collection never touches a namespace someone else named
// podbay-something.
func isID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
