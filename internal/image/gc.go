package image

import (
	"context"
	"fmt"
	"sort"

	"github.com/podbay/podbay/internal/log"
)

// collectOrphanLayers deletes layers no image or container references, when
// a failed operation may have left some. containers/image commits a pull's
// layers one by one as they arrive, so a pull that fails or is cancelled
// half way leaves the layers it had finished; so does a crash between
// c/storage creating a container's layer and its record.
//
// It runs only when no other layer writer is in flight (one that is would
// see its fresh, not yet referenced layers deleted); if one is, the last
// writer to finish collects.
func (s *Store) collectOrphanLayers(ctx context.Context) {
	if !s.gcPending.Load() || !s.layerWriters.TryLock() {
		return
	}
	defer s.layerWriters.Unlock()
	if !s.gcPending.CompareAndSwap(true, false) {
		return
	}
	removed, err := s.removeOrphanLayers()
	if err != nil {
		s.gcPending.Store(true)
		log.G(ctx).Warn("collect orphan layers", "err", err)
	}
	if len(removed) > 0 {
		log.G(ctx).Info("removed orphan layers", "layers", removed)
	}
}

// removeOrphanLayers requires layerWriters held exclusively.
func (s *Store) removeOrphanLayers() ([]string, error) {
	layers, err := s.store.Layers()
	if err != nil {
		return nil, fmt.Errorf("list layers: %w", err)
	}
	images, err := s.store.Images()
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	containers, err := s.store.Containers()
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	parent := make(map[string]string, len(layers))
	for _, l := range layers {
		parent[l.ID] = l.Parent
	}
	keep := make(map[string]bool, len(layers))
	mark := func(id string) {
		for id != "" && !keep[id] {
			keep[id] = true
			id = parent[id]
		}
	}
	for _, img := range images {
		mark(img.TopLayer)
		for _, l := range img.MappedTopLayers {
			mark(l)
		}
	}
	for _, c := range containers {
		mark(c.LayerID)
	}
	depth := func(id string) int {
		n := 0
		for ; id != ""; id = parent[id] {
			n++
		}
		return n
	}
	var orphans []string
	for _, l := range layers {
		if !keep[l.ID] {
			orphans = append(orphans, l.ID)
		}
	}
	// A child of an orphan is an orphan too: delete the deepest first so
	// that no layer is deleted under a child.
	sort.Slice(orphans, func(i, j int) bool { return depth(orphans[i]) > depth(orphans[j]) })
	var removed []string
	for _, id := range orphans {
		if err := s.store.DeleteLayer(id); err != nil {
			return removed, fmt.Errorf("delete orphan layer %s: %w", id, err)
		}
		removed = append(removed, id)
	}
	return removed, nil
}
