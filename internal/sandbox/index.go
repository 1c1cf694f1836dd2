package sandbox

import (
	"fmt"
	"sync"

	"github.com/podbay/podbay/internal/byid"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/reserve"
)

// Index is the in-memory set of sandboxes and the reservation of their
// names. Its lock guards its maps only; it never does I/O.
type Index struct {
	mu    sync.RWMutex
	byID  map[string]*Sandbox // guarded by mu
	names map[string]string   // name → id; guarded by mu
	// res holds names reserved by a RunPodSandbox at work and the
	// sandboxes parked for a retry; guarded by mu.
	res reserve.Table
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{byID: map[string]*Sandbox{}, names: map[string]string{}}
}

// ErrNameReserved is wrapped when a name is taken by a published sandbox.
var ErrNameReserved = fmt.Errorf("name is reserved: %w", errdefs.ErrAlreadyExists)

// Reserve claims name for a new RunPodSandbox. If another request holds it,
// Reserve returns that request's Pending (and nil reservation) so the caller
// can wait for it; if a published sandbox holds it, its ID.
func (x *Index) Reserve(name string) (mine, other *reserve.Pending, existing string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p := x.res.Pending(name); p != nil {
		return nil, p, ""
	}
	if id, ok := x.names[name]; ok {
		return nil, nil, id
	}
	return x.res.Reserve(name), nil, ""
}

// Finish ends a reservation. On success sb is published under name, and
// parked if its requester already gave up; on failure the name is
// released.
func (x *Index) Finish(name string, p *reserve.Pending, sb *Sandbox, err error) {
	x.mu.Lock()
	id := ""
	if err == nil && sb != nil {
		x.byID[sb.ID] = sb
		x.names[name] = sb.ID
		id = sb.ID
	}
	x.res.Finish(name, p, id, err)
	x.mu.Unlock()
	close(p.Done)
}

// Abandon records that the requester of p gave up (its deadline expired):
// the sandbox, once made, waits parked for the kubelet's retry.
func (x *Index) Abandon(p *reserve.Pending) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.res.Abandon(p, x.byID[p.ID] != nil)
}

// Take hands the finished result of p to a request that waited for it: the
// sandbox is no longer parked for anyone else.
func (x *Index) Take(p *reserve.Pending) (string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.res.Take(p)
}

// TakeParked hands the parked sandbox id to a retry and reports whether it
// was parked.
func (x *Index) TakeParked(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.res.TakeParked(id)
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
	x.res.Forget(sb.ID)
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
