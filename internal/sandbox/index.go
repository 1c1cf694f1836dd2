package sandbox

import (
	"fmt"
	"sync"

	"github.com/podbay/podbay/internal/byid"
	"github.com/podbay/podbay/internal/errdefs"
)

// Index is the in-memory set of sandboxes and the reservation of their
// names. Its lock guards its maps only; it never does I/O.
type Index struct {
	mu    sync.RWMutex
	byID  map[string]*Sandbox // guarded by mu
	names map[string]string   // name → id; guarded by mu
	// pending holds names reserved by a RunPodSandbox in progress.
	pending map[string]*Pending // guarded by mu
}

// Pending is a name reservation held by a RunPodSandbox in progress. Done is
// closed when it ends; then ID is set if it made a sandbox.
type Pending struct {
	Done chan struct{}
	ID   string
	Err  error

	// abandoned is set when the requester gave up; the sandbox is then
	// parked when it is published. Guarded by the index's mu.
	abandoned bool
	sb        *Sandbox
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		byID:    map[string]*Sandbox{},
		names:   map[string]string{},
		pending: map[string]*Pending{},
	}
}

// ErrNameReserved is wrapped when a name is taken by a published sandbox.
var ErrNameReserved = fmt.Errorf("name is reserved: %w", errdefs.ErrAlreadyExists)

// Reserve claims name for a new RunPodSandbox. If another request holds it,
// Reserve returns that request's Pending (and nil reservation) so the caller
// can wait for it; if a published sandbox holds it, the sandbox.
func (x *Index) Reserve(name string) (mine, other *Pending, existing *Sandbox) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.pending[name]; ok {
		return nil, p, nil
	}
	if id, ok := x.names[name]; ok {
		return nil, nil, x.byID[id]
	}
	p := &Pending{Done: make(chan struct{})}
	x.pending[name] = p
	return p, nil, nil
}

// Finish ends a reservation. On success sb is published under name, and
// parked if its requester already gave up; on failure the name is
// released.
func (x *Index) Finish(name string, p *Pending, sb *Sandbox, err error) {
	x.mu.Lock()
	delete(x.pending, name)
	if err == nil && sb != nil {
		x.byID[sb.ID] = sb
		x.names[name] = sb.ID
		p.ID = sb.ID
		p.sb = sb
		if p.abandoned {
			sb.setParked(true)
		}
	}
	p.Err = err
	x.mu.Unlock()
	close(p.Done)
}

// Abandon records that the requester of p gave up (its deadline expired):
// the sandbox, once made, waits parked for the kubelet's retry.
func (x *Index) Abandon(p *Pending) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p.abandoned = true
	if p.sb != nil && x.byID[p.sb.ID] == p.sb {
		p.sb.setParked(true)
	}
}

// Take hands the finished result of p to a request that waited for it: the
// sandbox is no longer parked for anyone else.
func (x *Index) Take(p *Pending) (string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p.Err != nil {
		return "", p.Err
	}
	if p.sb != nil {
		p.sb.setParked(false)
	}
	return p.ID, nil
}

// TakeParked hands a parked sandbox to a retry and reports whether it was
// parked.
func (x *Index) TakeParked(sb *Sandbox) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	was := sb.isParked()
	sb.setParked(false)
	return was
}

// Add publishes a sandbox (recovery at start-up).
func (x *Index) Add(name string, sb *Sandbox) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byID[sb.ID] = sb
	x.names[name] = sb.ID
}

// Delete unpublishes a sandbox and releases its name.
func (x *Index) Delete(sb *Sandbox) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.byID[sb.ID]; !ok {
		return
	}
	delete(x.byID, sb.ID)
	for name, id := range x.names {
		if id == sb.ID {
			delete(x.names, name)
		}
	}
}

// Get finds a sandbox by full ID or unique ID prefix.
func (x *Index) Get(idOrPrefix string) (*Sandbox, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return byid.Lookup(x.byID, idOrPrefix, "sandbox")
}

// List returns all published sandboxes ordered by ID.
func (x *Index) List() []*Sandbox {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return byid.Sorted(x.byID)
}

// Has reports whether id is a published sandbox.
func (x *Index) Has(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.byID[id]
	return ok
}
