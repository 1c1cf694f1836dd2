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
	if *errp != nil {
		run(ctx, Timeout, step, undo)
	}
}

// Chain is the undo steps of a create whose resources depend on each
// other: once a step fails, the steps after it (which release what was
// acquired earlier) are skipped, because a failed undo is retried later
// and needs them still there — a CNI DEL that failed needs the namespace
// still pinned when it is retried. Failed tells the caller to keep its
// record for that retry. The zero Chain bounds each step by Timeout.
type Chain struct {
	// Timeout bounds each step; zero means the package's Timeout.
	Timeout time.Duration
	failed  bool
}

// OnError runs undo, as the package's OnError does, unless an earlier step
// of the chain failed.
func (c *Chain) OnError(ctx context.Context, errp *error, step string, undo func(context.Context) error) {
	if *errp == nil {
		return
	}
	if c.failed {
		log.G(ctx).Warn("rollback step skipped after an earlier one failed; kept for recovery", "step", step)
		return
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = Timeout
	}
	c.failed = run(ctx, timeout, step, undo) != nil
}

// Failed reports whether a step of the chain failed.
func (c *Chain) Failed() bool { return c.failed }

func run(ctx context.Context, timeout time.Duration, step string, undo func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := undo(ctx)
	if err != nil {
		log.G(ctx).Error("rollback step failed", "step", step, "err", err)
	}
	return err
}
