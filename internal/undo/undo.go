// Package undo runs the undo steps of a half-made resource: each step of a
// multi-step create registers how to take it back, and the steps run when
// the create fails.
package undo

import (
	"context"
	"time"

	"github.com/podbay/podbay/internal/log"
)

// Timeout bounds each undo step that runs after the caller gave up.
const Timeout = 30 * time.Second

// OnError runs undo when *errp is set at return, on a context that
// outlives the caller's cancellation (and keeps its log fields) but is
// bounded by Timeout. A failed undo is logged with step, since it cannot
// be returned. Use it deferred, right after the resource is acquired:
//
//	defer undo.OnError(ctx, &retErr, "remove bundle", removeBundle)
func OnError(ctx context.Context, errp *error, step string, undo func(context.Context) error) {
	if *errp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	if err := undo(ctx); err != nil {
		log.G(ctx).Error("rollback step failed", "step", step, "err", err)
	}
}
