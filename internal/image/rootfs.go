package image

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"go.podman.io/storage"
	"go.podman.io/storage/pkg/idtools"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/undo"
)

// RootfsOptions are the options of CreateRootfs.
type RootfsOptions struct {
	// MountLabel is the SELinux context of the mount; empty on hosts
	// without SELinux.
	MountLabel string
	// UIDMap and GIDMap, when set, are the user namespace the rootfs is
	// for (a pod with hostUsers: false): containers/storage makes the
	// layers' files owned by the mapped IDs (idmapped lower layers where
	// the kernel can, else a chowned copy), as in CRI-O.
	UIDMap, GIDMap []idtools.IDMap
}

// CreateRootfs creates the root filesystem of container (or sandbox) id: a
// containers/storage container named id, made from imageID (an ID, or any
// reference Status accepts) with a writable overlay layer on top, and
// mounts it. It returns the mountpoint.
//
// It is idempotent: for an id that already has a root filesystem from the
// same image it returns the existing mountpoint, mounting it if needed; from
// another image it is ErrAlreadyExists.
func (s *Store) CreateRootfs(ctx context.Context, id, imageID string, opts RootfsOptions) (_ string, retErr error) {
	if id == "" {
		return "", fmt.Errorf("create rootfs: empty id: %w", errdefs.ErrInvalidArgument)
	}
	s.layerWriters.RLock()
	defer func() {
		s.layerWriters.RUnlock()
		if retErr != nil {
			s.gcPending.Store(true)
		}
		s.collectOrphanLayers(ctx)
	}()

	m, err := s.resolve(imageID)
	if err != nil {
		return "", fmt.Errorf("create rootfs %s: %w", id, err)
	}
	c, err := s.container(id)
	if err != nil {
		return "", err
	}
	if c == nil {
		// Volatile: containers/storage writes the records of this root
		// filesystem (the container and its writable layer) without
		// fsync, as it does for podman's --rm containers. A daemon crash
		// loses nothing (the page cache has them); a host crash may lose
		// the records of the last changes, which only kills pods that die
		// with the host anyway, and New collects the directories they
		// named. The fsyncs serialise every rootfs create and delete on
		// the disk: at 10 concurrent pods they were most of the time.
		copts := &storage.ContainerOptions{Volatile: !s.cfg.SyncRootfsRecords}
		if len(opts.UIDMap) > 0 || len(opts.GIDMap) > 0 {
			copts.IDMappingOptions = storage.IDMappingOptions{UIDMap: opts.UIDMap, GIDMap: opts.GIDMap}
		}
		c, err = s.store.CreateContainer(id, []string{id}, m.img.ID, "", "", copts)
		if errors.Is(err, storage.ErrDuplicateID) || errors.Is(err, storage.ErrDuplicateName) {
			// A concurrent CreateRootfs for the same id won.
			c, err = s.container(id)
			if err == nil && c == nil {
				err = fmt.Errorf("create rootfs %s: container vanished: %w", id, errdefs.ErrUnavailable)
			}
		} else if err == nil {
			defer undo.OnError(ctx, &retErr, "delete rootfs container", func(context.Context) error {
				return s.store.DeleteContainer(id)
			})
		}
		if err != nil {
			return "", fmt.Errorf("create rootfs %s: %w", id, err)
		}
	}
	if c.ImageID != m.img.ID {
		return "", fmt.Errorf("create rootfs %s: exists from image %s, not %s: %w",
			id, c.ImageID, m.img.ID, errdefs.ErrAlreadyExists)
	}
	return s.mount(c, opts)
}

// container returns the c/storage container whose ID is id, or nil.
// (c/storage's own lookup also accepts names and ID prefixes.)
func (s *Store) container(id string) (*storage.Container, error) {
	c, err := s.store.Container(id)
	if errors.Is(err, storage.ErrContainerUnknown) || (err == nil && c.ID != id) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up rootfs %s: %w", id, err)
	}
	return c, nil
}

// mount mounts c's root filesystem unless it already is, so that a repeated
// CreateRootfs does not raise the mount count.
func (s *Store) mount(c *storage.Container, opts RootfsOptions) (string, error) {
	if n, err := s.store.Mounted(c.ID); err == nil && n > 0 {
		if layer, err := s.store.Layer(c.LayerID); err == nil && layer.MountPoint != "" {
			return layer.MountPoint, nil
		}
	}
	mp, err := s.store.Mount(c.ID, opts.MountLabel)
	if err != nil {
		return "", fmt.Errorf("mount rootfs %s: %w", c.ID, err)
	}
	return mp, nil
}

// RemoveRootfs unmounts (forcibly) and deletes id's root filesystem. An
// unknown id is not an error.
//
// It accepts every state a crash can leave behind: a container whose layer
// c/storage already deleted (DeleteContainer deletes the layer first, and a
// layer whose deletion was interrupted is dropped when the store is next
// opened), a layer that is not mounted or whose mount went away behind
// c/storage's back, and a container that a concurrent call removed. Only
// what is still there is removed; what is gone counts as done.
//
// On a full disk, where containers/storage cannot rewrite its lists, it
// releases the store's reserved space and tries again, then reserves again
// from what the removal freed.
func (s *Store) RemoveRootfs(ctx context.Context, id string) error {
	err := s.removeRootfs(ctx, id)
	if err == nil || !errdefs.IsDiskFull(err) || !s.reserve.release(ctx) {
		return err
	}
	if err := s.removeRootfs(ctx, id); err != nil {
		return err
	}
	s.reserve.restore(ctx)
	return nil
}

func (s *Store) removeRootfs(ctx context.Context, id string) error {
	c, err := s.container(id)
	if err != nil || c == nil {
		return err
	}
	if _, err := s.store.Unmount(c.ID, true); err != nil && !gone(err) && !errors.Is(err, storage.ErrLayerNotMounted) {
		return fmt.Errorf("unmount rootfs %s: %w", id, err)
	}
	if err := s.store.DeleteContainer(c.ID); err != nil && !gone(err) {
		return fmt.Errorf("delete rootfs %s: %w", id, err)
	}
	log.G(ctx).Debug("removed rootfs", "id", id)
	return nil
}

// gone reports whether err is c/storage saying that a container or layer
// does not exist (any more).
func gone(err error) bool {
	return errors.Is(err, storage.ErrContainerUnknown) || errors.Is(err, storage.ErrNotAContainer) ||
		errors.Is(err, storage.ErrLayerUnknown)
}

// Rootfses lists the ids of the root filesystems storage holds, so that a
// restarted daemon can remove those no record owns.
func (s *Store) Rootfses(ctx context.Context) ([]string, error) {
	containers, err := s.store.Containers()
	if err != nil {
		return nil, fmt.Errorf("list rootfses: %w", err)
	}
	ids := make([]string, 0, len(containers))
	for _, c := range containers {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// RootfsUsage returns the bytes and inodes of id's writable layer.
func (s *Store) RootfsUsage(ctx context.Context, id string) (FsUsage, error) {
	c, err := s.container(id)
	if err != nil {
		return FsUsage{}, err
	}
	if c == nil {
		return FsUsage{}, fmt.Errorf("rootfs %s: %w", id, errdefs.ErrNotFound)
	}
	dir, err := s.upperDir(c.LayerID)
	if err != nil {
		return FsUsage{}, fmt.Errorf("rootfs %s: %w", id, err)
	}
	return diskUsage(dir)
}

// upperDir is the directory holding a container layer's own changes.
func (s *Store) upperDir(layerID string) (string, error) {
	driver, err := s.store.GraphDriver()
	if err != nil {
		return "", err
	}
	md, err := driver.Metadata(layerID)
	if err != nil {
		return "", err
	}
	if dir := md["UpperDir"]; dir != "" {
		return dir, nil
	}
	// vfs keeps a full copy per layer and reports no metadata.
	return filepath.Join(s.store.GraphRoot(), driver.String(), "dir", layerID), nil
}
