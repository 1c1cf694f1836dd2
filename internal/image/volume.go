package image

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"go.podman.io/storage"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Image volumes (KEP-4639, CRI Mount.image): an image's root filesystem
// mounted read-only so that containers can bind it in. As in CRI-O, it is
// containers/storage's own image mount (MountImage): the image's top layer
// and its parents as a read-only overlay, with no writable layer. One mount
// serves every container that mounts the image; the store counts the
// containers (owners) itself and unmounts when the last is released, so
// containers/storage's mount count, which a crash can leave off by one,
// never decides. While an owner holds an image, Remove refuses it, as it
// refuses an image a root filesystem was created from.
//
// The owners live in memory only: after a restart the server declares
// them again from its container records (HoldVolume), and CollectVolumes
// unmounts what no record holds.

// volumeMountOptions are the image mount's options; containers/storage
// adds "ro". nodev as for root filesystems (a device node in an image
// gives no way to the host's devices), nosuid as CRI-O. Not noexec: an
// image volume commonly carries programs, and containerd (and CRI-O,
// whose container sees an overlay of the mount) lets them run.
var volumeMountOptions = []string{"nosuid", "nodev"}

// volumes tracks the owners of image mounts, keyed by top layer: two
// images (one re-tagged with another config, say) can share it, and
// containers/storage mounts the layer.
type volumes struct {
	mu     sync.Mutex
	owners map[string]map[string]string // guarded by mu; top layer → owner → image ID
	locks  map[string]*layerLock        // guarded by mu; per top layer
}

// layerLock serialises the mounts, unmounts and image deletions of one top
// layer, so that a last owner's unmount and a new owner's mount do not
// interleave.
type layerLock struct {
	mu   sync.Mutex
	refs int // guarded by volumes.mu: holders and waiters
}

// lock takes layer's lock and returns its release.
func (v *volumes) lock(layer string) func() {
	v.mu.Lock()
	if v.locks == nil {
		v.locks = map[string]*layerLock{}
	}
	l := v.locks[layer]
	if l == nil {
		l = &layerLock{}
		v.locks[layer] = l
	}
	l.refs++
	v.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		v.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(v.locks, layer)
		}
		v.mu.Unlock()
	}
}

// add records owner on layer for imageID and reports whether it is new.
func (v *volumes) add(layer, owner, imageID string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.owners == nil {
		v.owners = map[string]map[string]string{}
	}
	o := v.owners[layer]
	if o == nil {
		o = map[string]string{}
		v.owners[layer] = o
	}
	_, had := o[owner]
	o[owner] = imageID
	return !had
}

// remove drops owner from layer and reports how many owners are left.
func (v *volumes) remove(layer, owner string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	o := v.owners[layer]
	delete(o, owner)
	if len(o) == 0 {
		delete(v.owners, layer)
	}
	return len(o)
}

// count returns how many owners layer has and how many of them hold it
// through imageID.
func (v *volumes) count(layer, imageID string) (all, ofImage int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range v.owners[layer] {
		all++
		if id == imageID {
			ofImage++
		}
	}
	return all, ofImage
}

// layersOf returns the top layers owner holds, sorted.
func (v *volumes) layersOf(owner string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for layer, o := range v.owners {
		if _, ok := o[owner]; ok {
			out = append(out, layer)
		}
	}
	sort.Strings(out)
	return out
}

// MountVolume mounts the root filesystem of image ref (an ID, or any
// reference Status accepts) read-only for owner (a container ID) and
// returns the mountpoint and the image's ID. Calling it again for the
// same owner and image is harmless. An unknown image is ErrNotFound, an
// image with no layers ErrInvalidArgument.
func (s *Store) MountVolume(ctx context.Context, ref, owner string) (mountpoint, imageID string, retErr error) {
	if owner == "" {
		return "", "", fmt.Errorf("mount image volume: empty owner: %w", errdefs.ErrInvalidArgument)
	}
	m, err := s.resolve(ref)
	if err != nil {
		return "", "", fmt.Errorf("mount image %s: %w", ref, err)
	}
	img := m.img
	if img.TopLayer == "" {
		return "", "", fmt.Errorf("mount image %s: it has no layers: %w", ref, errdefs.ErrInvalidArgument)
	}
	unlock := s.vols.lock(img.TopLayer)
	defer unlock()
	if s.vols.add(img.TopLayer, owner, img.ID) {
		defer func() {
			if retErr != nil {
				s.vols.remove(img.TopLayer, owner)
				s.unmountUnownedLocked(ctx, img.TopLayer)
			}
		}()
	}
	mp, err := s.store.MountImage(img.ID, volumeMountOptions, "")
	if errors.Is(err, storage.ErrImageUnknown) {
		// Removed since resolve.
		return "", "", fmt.Errorf("mount image %s: %w", ref, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", "", fmt.Errorf("mount image %s: %w", ref, err)
	}
	log.G(ctx).Debug("mounted image volume", "image", img.ID, "owner", owner, "mountpoint", mp)
	return mp, img.ID, nil
}

// HoldVolume records, without mounting anything, that owner holds image
// imageID's mount: how a restarted daemon declares the image volumes of
// the containers it reloaded, so that Remove refuses their images and
// CollectVolumes leaves them mounted. An image that is gone is
// ErrNotFound.
func (s *Store) HoldVolume(ctx context.Context, imageID, owner string) error {
	m, err := s.resolve(imageID)
	if err != nil {
		return fmt.Errorf("hold image volume %s: %w", imageID, err)
	}
	if m.img.TopLayer == "" {
		return nil
	}
	unlock := s.vols.lock(m.img.TopLayer)
	defer unlock()
	s.vols.add(m.img.TopLayer, owner, m.img.ID)
	return nil
}

// ReleaseVolumes releases every image mount owner holds, unmounting those
// no other owner holds. An owner that holds none is not an error. On an
// error the owner keeps what could not be unmounted, so a retry finishes.
func (s *Store) ReleaseVolumes(ctx context.Context, owner string) error {
	var errs []error
	for _, layer := range s.vols.layersOf(owner) {
		errs = append(errs, s.release(ctx, layer, owner))
	}
	return errors.Join(errs...)
}

func (s *Store) release(ctx context.Context, layer, owner string) error {
	unlock := s.vols.lock(layer)
	defer unlock()
	imageID := s.imageOf(layer, owner)
	if left := s.vols.remove(layer, owner); left > 0 {
		return nil
	}
	if err := s.unmountLayer(ctx, layer); err != nil {
		s.vols.add(layer, owner, imageID)
		return err
	}
	return nil
}

func (s *Store) imageOf(layer, owner string) string {
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	return s.vols.owners[layer][owner]
}

// unmountUnownedLocked unmounts layer if nobody owns it; the caller holds
// its lock. Failures are logged: it runs on error paths.
func (s *Store) unmountUnownedLocked(ctx context.Context, layer string) {
	if all, _ := s.vols.count(layer, ""); all > 0 {
		return
	}
	if err := s.unmountLayer(ctx, layer); err != nil {
		log.G(ctx).Error("unmount image volume", "layer", layer, "err", err)
	}
}

// unmountLayer unmounts an image's top layer whatever its mount count. A
// layer that is gone or not mounted is not an error.
func (s *Store) unmountLayer(ctx context.Context, layer string) error {
	n, err := s.store.Mounted(layer)
	if err != nil && !gone(err) {
		return fmt.Errorf("unmount image volume %s: %w", layer, err)
	}
	if err != nil || n == 0 {
		return nil
	}
	if _, err := s.store.Unmount(layer, true); err != nil && !gone(err) && !errors.Is(err, storage.ErrLayerNotMounted) {
		return fmt.Errorf("unmount image volume %s: %w", layer, err)
	}
	log.G(ctx).Debug("unmounted image volume", "layer", layer)
	return nil
}

// CollectVolumes unmounts the image mounts no owner holds: those of
// containers a crash removed before their volumes were released. It
// returns the IDs of the images it unmounted.
func (s *Store) CollectVolumes(ctx context.Context) ([]string, error) {
	imgs, err := s.store.Images()
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var unmounted []string
	var errs []error
	seen := map[string]bool{}
	for _, img := range imgs {
		if img.TopLayer == "" || seen[img.TopLayer] {
			continue
		}
		seen[img.TopLayer] = true
		if n, err := s.store.Mounted(img.TopLayer); err != nil || n == 0 {
			continue
		}
		unlock := s.vols.lock(img.TopLayer)
		if all, _ := s.vols.count(img.TopLayer, ""); all == 0 {
			if err := s.unmountLayer(ctx, img.TopLayer); err != nil {
				errs = append(errs, err)
			} else {
				unmounted = append(unmounted, img.ID)
			}
		}
		unlock()
	}
	return unmounted, errors.Join(errs...)
}

// volumeInUse returns an ErrFailedPrecondition error if img is mounted as
// an image volume; the caller holds the lock of img's top layer.
func (s *Store) volumeInUse(img *storage.Image) error {
	if img.TopLayer == "" {
		return nil
	}
	if _, n := s.vols.count(img.TopLayer, img.ID); n > 0 {
		return fmt.Errorf("remove image %s: mounted as an image volume by %d container(s): %w",
			img.ID, n, errdefs.ErrFailedPrecondition)
	}
	return nil
}
