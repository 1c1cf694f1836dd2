package shim

import (
	"context"

	"github.com/podbay/podbay/internal/log"
)

// releaseIfDone gives p's shim back once every container recorded in the
// pod, the sandbox's included, has exited: it deletes their tasks in the
// shim (their exit statuses are on record) and shuts the shim down, as
// containerd does when a sandbox stops. A stopped pod then holds no
// process until it is removed, whatever the runtime behind the shim (for
// Kata, the VM is already gone with the sandbox task).
//
// What podbay records of the pod and its containers stays until Delete;
// meanwhile the pod behaves as one whose shim is gone: its containers are
// stopped, and Delete only removes what is left on disk.
func (r *Runtime) releaseIfDone(ctx context.Context, p *pod) {
	p.releaseMu.Lock()
	defer p.releaseMu.Unlock()
	if p.released || p.isDead() {
		return
	}
	r.mu.Lock()
	var cs []*container
	hasSandbox := false
	for _, c := range r.containers {
		if c.pod == p {
			cs = append(cs, c)
			hasSandbox = hasSandbox || c.sandbox
		}
	}
	r.mu.Unlock()
	if !hasSandbox {
		return // being created, or being deleted
	}
	for _, c := range cs {
		if _, ok := c.exitStatus(); !ok {
			return
		}
	}
	ctx = log.With(ctx, "pod", p.id)
	for _, c := range cs {
		deleted, err := r.deleteTask(ctx, p, c.id)
		if err != nil {
			// Kept: Delete tries again.
			log.G(ctx).Warn("release stopped pod's shim: delete task", "id", c.id, "err", err)
			return
		}
		if !deleted {
			// Unknown to the shim: Delete cleans up after its create
			// (see removeTask).
			continue
		}
		// Deleted properly: nothing for a dead-shim cleanup to do.
		st, _ := c.exitStatus()
		c.deadMu.Lock()
		if c.deadExit == nil {
			c.deadExit = &st
		}
		c.deadMu.Unlock()
	}
	p.released = true
	if err := r.stopShim(ctx, p); err != nil {
		log.G(ctx).Warn("release stopped pod's shim", "err", err)
		return
	}
	log.G(ctx).Debug("stopped pod's shim released")
}
