package server

import (
	"context"
	"fmt"
	"time"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/nameindex"
)

// RunPodSandbox and CreateContainer reserve their record's name, then do
// their work detached from the client: when the kubelet's deadline expires
// first, what the work makes is parked, and the kubelet's retry with the
// same metadata gets it instead of a "name is reserved" error.

// nameIndex is an index whose names RunPodSandbox and CreateContainer
// reserve (nameindex.Index).
type nameIndex interface {
	Reserve(name string) (mine, other *nameindex.Pending, existing string)
	Take(p *nameindex.Pending) (string, error)
	TakeParked(id string) bool
}

// claim reserves name in x for a new request, or finds what the kubelet's
// retry of an earlier request gets instead: the record that request made
// and parked after its client gave up, or the result of one still at work,
// waited for. Then mine is nil and id is that record's. A name held by a
// published record that is not parked is an error wrapping reserved.
func claim(ctx context.Context, x nameIndex, name string, reserved error) (mine *nameindex.Pending, id string, err error) {
	mine, other, existing := x.Reserve(name)
	switch {
	case existing != "":
		if x.TakeParked(existing) {
			log.G(ctx).Info("returning what an earlier request made after it gave up", "id", existing)
			return nil, existing, nil
		}
		return nil, "", fmt.Errorf("%s is held by %s: %w", name, existing, reserved)
	case other != nil:
		// A request with the same name is still at work: the kubelet
		// retried after its deadline. Wait for that one's result.
		select {
		case <-other.Done:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
		id, err := x.Take(other)
		if err != nil {
			return nil, "", fmt.Errorf("earlier attempt for %s failed: %w", name, err)
		}
		return nil, id, nil
	}
	return mine, "", nil
}

// detach runs the work of a request whose name is reserved detached from
// its client's cancellation, bounded by sandbox_timeout and the daemon's
// life, and returns its result. When the client gives up first (the
// kubelet's deadline), abandon is called, so that what the work makes is
// parked for the kubelet's retry, and the client's error is returned; the
// work goes on. work publishes its result (or releases the name) itself.
func detach[T any](s *Server, ctx context.Context, work func(context.Context) (T, error), abandon func()) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	done := make(chan result, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(s.current().Config().SandboxTimeout))
		defer cancel()
		// A daemon shutting down abandons the work; its rollback still runs.
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		v, err := work(wctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return zero, r.err
		}
		if ctx.Err() != nil {
			// Finished as the client gave up: it will not see the answer.
			abandon()
			return zero, ctx.Err()
		}
		return r.v, nil
	case <-ctx.Done():
		abandon()
		log.G(ctx).Info("client gave up; the result will be parked for the retry")
		return zero, ctx.Err()
	}
}
