package shim

import "context"

// ListIDs returns the IDs of every sandbox and container the handler
// holds (as restored from its state directory at start, or created since).
func (r *Runtime) ListIDs(context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.containers))
	for id := range r.containers {
		ids = append(ids, id)
	}
	return ids, nil
}
