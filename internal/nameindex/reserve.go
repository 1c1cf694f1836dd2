package nameindex

// A table keeps the names reserved by requests whose work outlives their
// client (RunPodSandbox, CreateContainer), and parks what such a request
// made after its client gave up until the kubelet's retry takes it (CRI-O
// does the same).
//
// A table has no lock of its own: the owning Index's lock guards it with
// the index's maps, so that reserving, publishing, parking and handing
// over a result happen in one order.

// Pending is a name reservation held by a request at work. Done is closed
// when the work ends; then ID is set if it made something, else Err.
type Pending struct {
	Done chan struct{}
	ID   string
	Err  error

	// abandoned is set when the requester gave up: what the work makes
	// is then parked.
	abandoned bool
}

// table holds the pending reservations and the parked results, by name
// and by ID. The zero value is ready to use.
type table struct {
	pending map[string]*Pending
	parked  map[string]bool
}

// Pending returns the reservation of name by a request at work, or nil.
func (t *table) Pending(name string) *Pending { return t.pending[name] }

// Reserve reserves name for a new request; the owner has checked that
// neither a request at work nor a published record holds it.
func (t *table) Reserve(name string) *Pending {
	if t.pending == nil {
		t.pending = map[string]*Pending{}
	}
	p := &Pending{Done: make(chan struct{})}
	t.pending[name] = p
	return p
}

// Finish ends p's reservation of name: id is what the work made, which the
// owner has just published under name, or "" when it failed with err.
// What was made is parked if p's requester already gave up. The owner
// closes p.Done once its lock is released.
func (t *table) Finish(name string, p *Pending, id string, err error) {
	delete(t.pending, name)
	p.ID, p.Err = id, err
	if id != "" && p.abandoned {
		t.park(id)
	}
}

// Abandon records that p's requester gave up (its deadline expired): what
// the work makes waits parked for the retry. published tells whether what
// it made already (p.ID) is still published.
func (t *table) Abandon(p *Pending, published bool) {
	p.abandoned = true
	if p.ID != "" && published {
		t.park(p.ID)
	}
}

// Take hands the result of a finished p to a request that waited for it:
// what it made is no longer parked for anyone else.
func (t *table) Take(p *Pending) (string, error) {
	if p.Err != nil {
		return "", p.Err
	}
	delete(t.parked, p.ID)
	return p.ID, nil
}

// TakeParked hands the parked record id to a retry and reports whether it
// was parked.
func (t *table) TakeParked(id string) bool {
	was := t.parked[id]
	delete(t.parked, id)
	return was
}

// Forget unparks id, which is no longer published.
func (t *table) Forget(id string) { delete(t.parked, id) }

func (t *table) park(id string) {
	if t.parked == nil {
		t.parked = map[string]bool{}
	}
	t.parked[id] = true
}
