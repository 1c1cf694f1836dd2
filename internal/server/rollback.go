package server

import (
	"context"

	"github.com/podbay/podbay/internal/log"
)

// rollback runs the undo steps of a failed operation in reverse order.
// Once a step fails, the steps after it (which release what was acquired
// earlier) are skipped: a CNI DEL that failed still needs the namespace to
// be pinned when it is retried, or the bridge plugin cannot find what to
// release. The caller keeps its record so the undo can be finished later.
type rollback struct {
	failed bool
}

// onError runs undo when *errp is set at return and no earlier undo step
// failed, on a context that outlives the caller's cancellation, keeps its
// log fields, and stays bounded.
func (rb *rollback) onError(ctx context.Context, errp *error, step string, undo func(context.Context) error) {
	if *errp == nil {
		return
	}
	if rb.failed {
		log.G(ctx).Warn("rollback step skipped after an earlier one failed; kept for recovery", "step", step)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := undo(ctx); err != nil {
		rb.failed = true
		log.G(ctx).Error("rollback step failed", "step", step, "err", err)
	}
}
