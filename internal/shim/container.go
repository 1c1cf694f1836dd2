package shim

import (
	"context"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/oci"
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
	exit     oci.ExitStatus
	// watching is closed when the exit watcher has returned.
	watching chan struct{}
	// exitEvent is closed when the shim's TaskExit event for the init
	// process arrives.
	exitEvent     chan struct{}
	exitEventOnce sync.Once

	deadMu   sync.Mutex
	deadExit *oci.ExitStatus // guarded by deadMu: set once the dead shim's task is deleted
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
func (c *container) exitStatus() (oci.ExitStatus, bool) {
	select {
	case <-c.exited:
		return c.exit, true
	default:
		return oci.ExitStatus{}, false
	}
}

func (c *container) setExit(st oci.ExitStatus) {
	c.exitOnce.Do(func() {
		c.exit = st
		close(c.exited)
	})
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
