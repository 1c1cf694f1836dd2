package shim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbay/podbay/internal/runtime"
)

// container is one task of a pod's shim.
type container struct {
	id  string
	rec containerRecord
	dir string
	pod *pod
	// io copies the output; its copies are started once the task exists.
	io *containerIO
	// sandbox is set for the pod's sandbox container, whose Delete stops
	// the shim.
	sandbox bool

	// exited is closed once exit is set: the exit status is recorded in
	// dir and the output copied.
	exited   chan struct{}
	exitOnce sync.Once
	exit     runtime.ExitStatus
	// watching is closed when the exit watcher has returned.
	watching chan struct{}
	// exitEvent is closed when the shim's TaskExit event for the init
	// process arrives.
	exitEvent     chan struct{}
	exitEventOnce sync.Once
	// oomKilled is set by the shim's TaskOOM event.
	oomKilled atomic.Bool

	deadMu   sync.Mutex
	deadExit *runtime.ExitStatus // guarded by deadMu: set once the dead shim's task is deleted
}

func newContainer(rec containerRecord, dir string, p *pod, cio *containerIO) *container {
	return &container{
		id:        rec.ID,
		rec:       rec,
		dir:       dir,
		pod:       p,
		io:        cio,
		sandbox:   rec.ID == rec.Pod,
		exited:    make(chan struct{}),
		watching:  make(chan struct{}),
		exitEvent: make(chan struct{}),
	}
}

// exitStatus returns the exit status once known.
func (c *container) exitStatus() (runtime.ExitStatus, bool) {
	select {
	case <-c.exited:
		return c.exit, true
	default:
		return runtime.ExitStatus{}, false
	}
}

// setExit records st, with the OOM kill the shim reported (see withOOM),
// and wakes the waiters, once.
func (c *container) setExit(st runtime.ExitStatus) {
	c.exitOnce.Do(func() {
		c.exit = c.withOOM(st)
		close(c.exited)
	})
}

// withOOM returns st with OOMKilled set when the shim reported an OOM
// kill of the container: by a TaskOOM event to this Runtime, or to an
// earlier one, which left the OOM marker in the bundle.
func (c *container) withOOM(st runtime.ExitStatus) runtime.ExitStatus {
	st.OOMKilled = st.OOMKilled || c.oomKilled.Load() || runtime.OOMMarked(c.rec.Bundle)
	return st
}

// waitExit waits up to d (d < 0: no limit) for the exit to be known, or
// until ctx ends.
func (r *Runtime) waitExit(ctx context.Context, c *container, d time.Duration) bool {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.exited:
		return true
	case <-timeout:
	case <-ctx.Done():
	case <-r.ctx.Done():
	}
	_, ok := c.exitStatus()
	return ok
}

func (c *container) sawExitEvent() { c.exitEventOnce.Do(func() { close(c.exitEvent) }) }
