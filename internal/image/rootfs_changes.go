package image

import (
	"context"
	"fmt"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/errdefs"
)

// RootfsChanges lists what container id changed in its root filesystem
// since its image (its writable layer's changes): the paths it added,
// modified and deleted, for a checkpoint's rootfs diff.
func (s *Store) RootfsChanges(ctx context.Context, id string) ([]checkpoint.Change, error) {
	c, err := s.container(id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("rootfs %s: %w", id, errdefs.ErrNotFound)
	}
	changes, err := s.store.Changes("", c.LayerID)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s changes: %w", id, err)
	}
	out := make([]checkpoint.Change, 0, len(changes))
	for _, ch := range changes {
		out = append(out, checkpoint.Change{Path: ch.Path, Kind: checkpoint.ChangeKind(ch.Kind)})
	}
	return out, nil
}
