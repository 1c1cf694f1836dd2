// Package nameindex holds the in-memory set of published records of one
// kind (sandboxes, containers): found by full ID or unique ID prefix, each
// published under a name that is reserved while the request making it is
// at work, and parked for the kubelet's retry when that request's client
// gave up before the work finished.
package nameindex

import (
	"fmt"
	"slices"
	"sync"

	"github.com/podbay/podbay/internal/errdefs"
)

// ErrNameReserved is wrapped when a name is taken by a published record.
var ErrNameReserved = fmt.Errorf("name is reserved: %w", errdefs.ErrAlreadyExists)

// Index is the set of published records of type T and the reservation of
// their names. Its lock guards its maps only; it never does I/O.
type Index[T any] struct {
	kind string         // names the records in errors
	id   func(T) string // a record's ID, which never changes

	mu     sync.RWMutex
	byID   map[string]T      // guarded by mu
	names  map[string]string // name → id of a published record; guarded by mu
	nameOf map[string]string // id → its name; guarded by mu
	// res holds names reserved by a request at work and the records
	// parked for a retry; guarded by mu.
	res table

	// sorted is byID's values ordered by ID, made by List and dropped by
	// every change, so that polling a thousand records does not sort
	// them on every call; guarded by mu.
	sorted []T
	// group, when set, files each record under a key (a container's
	// sandbox) in groups, so that a group is found without a scan.
	group  func(T) string
	groups map[string]map[string]T // group → id → record; guarded by mu
}

// New returns an empty index of records that id identifies; kind
// ("sandbox", "container") names them in errors.
func New[T any](kind string, id func(T) string) *Index[T] {
	return &Index[T]{
		kind: kind, id: id,
		byID: map[string]T{}, names: map[string]string{}, nameOf: map[string]string{},
	}
}

// Grouped returns an empty index like New's whose records are also
// found by the key group gives each (InGroup).
func Grouped[T any](kind string, id, group func(T) string) *Index[T] {
	x := New(kind, id)
	x.group, x.groups = group, map[string]map[string]T{}
	return x
}

// Reserve claims name for a new request. If another request holds it,
// Reserve returns that request's Pending (and no reservation) so that the
// caller can wait for it; if a published record holds it, its ID.
func (x *Index[T]) Reserve(name string) (mine, other *Pending, existing string) {
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

// Finish ends the reservation p of name. When err is nil, v is published
// under name, and parked if its requester already gave up; otherwise the
// name is released. v must be set when err is nil. Finish closes p.Done.
func (x *Index[T]) Finish(name string, p *Pending, v T, err error) {
	x.mu.Lock()
	id := ""
	if err == nil {
		id = x.id(v)
		x.publishLocked(name, id, v)
	}
	x.res.Finish(name, p, id, err)
	x.mu.Unlock()
	close(p.Done)
}

// Abandon records that the requester of p gave up (its deadline expired):
// the record, once made, waits parked for the kubelet's retry.
func (x *Index[T]) Abandon(p *Pending) {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, published := x.byID[p.ID]
	x.res.Abandon(p, published)
}

// Take hands the finished result of p to a request that waited for it:
// the record is no longer parked for anyone else.
func (x *Index[T]) Take(p *Pending) (string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.res.Take(p)
}

// TakeParked hands the parked record id to a retry and reports whether it
// was parked.
func (x *Index[T]) TakeParked(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.res.TakeParked(id)
}

// Add publishes v under name without a reservation (recovery at
// start-up).
func (x *Index[T]) Add(name string, v T) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.publishLocked(name, x.id(v), v)
}

// Delete unpublishes v, frees its name and unparks it. Deleting what is
// not published does nothing.
func (x *Index[T]) Delete(v T) {
	id := x.id(v)
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.byID[id]; !ok {
		return
	}
	delete(x.byID, id)
	x.sorted = nil
	if x.group != nil {
		g := x.group(v)
		delete(x.groups[g], id)
		if len(x.groups[g]) == 0 {
			delete(x.groups, g)
		}
	}
	x.res.Forget(id)
	name := x.nameOf[id]
	delete(x.nameOf, id)
	if x.names[name] == id {
		delete(x.names, name)
	}
}

// Get finds a record by full ID or unique ID prefix: an empty or
// ambiguous prefix is errdefs.ErrInvalidArgument, no match
// errdefs.ErrNotFound.
func (x *Index[T]) Get(idOrPrefix string) (T, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return lookup(x.byID, idOrPrefix, x.kind)
}

// List returns all published records ordered by ID. The slice is the
// caller's.
func (x *Index[T]) List() []T {
	x.mu.RLock()
	if x.sorted != nil || len(x.byID) == 0 {
		out := slices.Clone(x.sorted)
		x.mu.RUnlock()
		return out
	}
	x.mu.RUnlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted == nil {
		x.sorted = sorted(x.byID)
	}
	return slices.Clone(x.sorted)
}

// InGroup returns the published records filed under key, ordered by ID;
// none for an index made by New.
func (x *Index[T]) InGroup(key string) []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return sorted(x.groups[key])
}

// Has reports whether id is published.
func (x *Index[T]) Has(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.byID[id]
	return ok
}

func (x *Index[T]) publishLocked(name, id string, v T) {
	x.byID[id] = v
	x.sorted = nil
	if x.group != nil {
		g := x.group(v)
		if x.groups[g] == nil {
			x.groups[g] = map[string]T{}
		}
		x.groups[g][id] = v
	}
	x.names[name] = id
	x.nameOf[id] = name
}
