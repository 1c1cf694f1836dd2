package oci

import "context"

// ListIDs returns the IDs of every container the runtime knows under
// RuntimeRoot, running or not.
func (r *Runtime) ListIDs(ctx context.Context) ([]string, error) {
	states, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(states))
	for _, st := range states {
		ids = append(ids, st.ID)
	}
	return ids, nil
}
