package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
)

// RemoveContainer answers once the container is stopped, its monitor has
// exited and its removal is durable (the record says Removing), and it is
// unpublished: ListContainers and ContainerStatus no longer see it. The
// rest, which is most of the time (the runtime's delete, the root
// filesystem's unmount and deletion, the container directory, the record),
// is finished in the background, as containerd removes snapshots by
// garbage collection. It is crash-safe: a restart finds the Removing
// record and finishes the removal. RemovePodSandbox waits for the pod's
// background removals before it removes the pod, and RemoveImage waits
// for them before it calls an image in use.

// containerRemovals are the removals being finished in the background. The
// zero value is ready to use.
type containerRemovals struct {
	mu      sync.Mutex
	pending map[string]*pendingRemoval // by container ID; guarded by mu
}

type pendingRemoval struct {
	sandboxID string
	done      chan struct{}

	mu      sync.Mutex
	lastErr error // of the last attempt; guarded by mu
}

func (p *pendingRemoval) setErr(err error) {
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
}

func (p *pendingRemoval) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

func (r *containerRemovals) add(id, sandboxID string) *pendingRemoval {
	p := &pendingRemoval{sandboxID: sandboxID, done: make(chan struct{})}
	r.mu.Lock()
	if r.pending == nil {
		r.pending = make(map[string]*pendingRemoval)
	}
	r.pending[id] = p
	r.mu.Unlock()
	return p
}

func (r *containerRemovals) finish(id string, p *pendingRemoval) {
	r.mu.Lock()
	if r.pending[id] == p {
		delete(r.pending, id)
	}
	r.mu.Unlock()
	close(p.done)
}

// wait waits until the background removals of the containers of pod
// sandboxID ("" for every pod) are done, or ctx ends; then the error says
// what the last attempt of one still pending failed with.
func (r *containerRemovals) wait(ctx context.Context, sandboxID string) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	var waits []*pendingRemoval
	var ids []string
	for id, p := range r.pending {
		if sandboxID == "" || p.sandboxID == sandboxID {
			waits = append(waits, p)
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for i, p := range waits {
		select {
		case <-p.done:
		case <-ctx.Done():
			err := ctx.Err()
			if last := p.err(); last != nil {
				err = fmt.Errorf("%w (last attempt: %w)", err, last)
			}
			return fmt.Errorf("removal of container %s is not finished: %w", ids[i], err)
		}
	}
	return nil
}

// removeContainerEarly is RemoveContainer's removal of c: the caller
// holds c.OpMu. It returns once c is stopped, its monitor gone and its
// Removing persisted, and unpublished; the background finishes the rest.
// If Removing cannot be persisted, it removes c at once instead.
func (s *Server) removeContainerEarly(ctx context.Context, c *container.Container) error {
	rec := c.Update(func(r *container.Record) { r.Removing = true })
	if err := s.saveContainer(rec); err != nil {
		log.G(ctx).Warn("persist container removal; removing it in the foreground", "err", err)
		return s.removeContainerLocked(ctx, c)
	}
	if err := s.stopContainerLocked(ctx, c, 0); err != nil {
		return err
	}
	timer := s.metrics.StartContainer(ctx, "remove")
	if rec.RuntimeCreated {
		// What TestRemoveMeansGone checks: nothing of the container runs
		// on once RemoveContainer answers.
		if mw := s.containerCapabilities(rec).Monitors; mw != nil {
			if err := mw.WaitMonitor(ctx, c.ID); err != nil {
				return fmt.Errorf("remove container: %w", err)
			}
		}
		timer.Phase("monitor")
	}
	p := s.removals.add(c.ID, rec.SandboxID)
	c.EventMu.Lock()
	s.containers.Delete(c)
	s.publishContainerEvent(ctx, c, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	c.EventMu.Unlock()
	timer.Phase("unpublish")

	bctx := log.With(context.WithoutCancel(ctx), "container", c.ID)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.removals.finish(c.ID, p)
		s.finishRemoveInBackground(bctx, c, p)
	}()
	log.G(ctx).Info("container removed; its resources are released in the background")
	return nil
}

// finishRemoveInBackground releases what c holds and deletes its record,
// retrying until that works or the daemon stops (a restart finishes it
// then: the record says Removing).
func (s *Server) finishRemoveInBackground(ctx context.Context, c *container.Container, p *pendingRemoval) {
	rec := c.Record()
	delay := 50 * time.Millisecond
	for {
		timer := s.metrics.StartContainer(ctx, "remove_background")
		err := s.releaseContainer(ctx, rec, timer)
		if err == nil {
			if err = s.db.Delete(containerBucket, c.ID); err != nil {
				err = fmt.Errorf("delete container record: %w", err)
			}
		}
		if err == nil {
			timer.Phase("persist")
			s.nriRemoveContainer(ctx, rec)
			log.G(ctx).Debug("container's resources released")
			return
		}
		p.setErr(err)
		log.G(ctx).Warn("release removed container's resources; will retry", "err", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, undoRetryInterval)
	}
}

// releaseContainer deletes rec's runtime container, root filesystem, image
// volumes and directory. Each step is idempotent.
func (s *Server) releaseContainer(ctx context.Context, rec container.Record, timer *metrics.Timer) error {
	if rec.RuntimeCreated {
		if err := s.deleteFromRuntime(ctx, rec); err != nil {
			return fmt.Errorf("delete container: %w", err)
		}
		timer.Phase("runtime_delete")
	}
	// Before the root filesystem, whose unmount needs a little space on
	// the root and the state dir that these free on a full disk; after the
	// runtime's delete, which a shim needs to unmount what it mounted in
	// the bundle.
	if err := removeRecordDirs(rec.Dir, rec.BundleDir()); err != nil {
		return fmt.Errorf("remove container dir: %w", err)
	}
	timer.Phase("dir")
	if err := s.images.RemoveRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("remove container root filesystem: %w", err)
	}
	if err := s.releaseImageVolumes(ctx, rec.ID); err != nil {
		return err
	}
	timer.Phase("rootfs")
	return nil
}
