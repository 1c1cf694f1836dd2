// Package orphans releases what podbay holds on the host that no sandbox
// or container record owns: the runtimes' containers (killed and deleted
// first), network namespaces named podbay-<id>, the pinned IPC and UTS
// namespaces of pods without a sandbox process (<state>/pinns/<id>), pods'
// shared /dev/shm tmpfs (<state>/shm/<id>), CNI
// attachments in podbay's private libcni cache (which hold IPAM
// reservations and host rules), root filesystems and image volumes in podbay's storage,
// sandbox and container dirs, and their OCI bundles (<state>/bundles/<id>). The daemon runs it once at start-up, when
// recovery has reconciled every record (internal/server's Recover).
package orphans

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/runtime"
)

// Network is the pod network's cache of attachments.
type Network interface {
	Cached() ([]network.CachedAttachment, error)
	TeardownCached(ctx context.Context, c network.CachedAttachment) error
}

// NetNS is the pods' pinned network namespaces (netns.Host).
type NetNS interface {
	List(dir string) ([]string, error)
	InUse(path string) (bool, error)
	Remove(path string) error
}

// Images is the image store's root filesystems and image volumes.
type Images interface {
	Rootfses(ctx context.Context) ([]string, error)
	RemoveRootfs(ctx context.Context, id string) error
	// CollectVolumes unmounts the image volumes no container holds and
	// returns their images.
	CollectVolumes(ctx context.Context) ([]string, error)
}

// Host is where the orphans are looked for.
type Host struct {
	// Root is podbay's root dir (sandboxes/, containers/ and the
	// bundles of records written before BundleRoot under them); NetNSDir
	// where the namespaces are pinned.
	Root     string
	NetNSDir string
	// BundleRoot holds the containers' and sandboxes' OCI bundles, one
	// dir per ID (config.BundlesRoot).
	BundleRoot string
	// PinRoot holds the pin directories of pods without a sandbox
	// process (podns.Root).
	PinRoot string
	// ShmRoot holds the pods' shared /dev/shm mounts (podshm.Root).
	ShmRoot string
	Network Network
	NetNS   NetNS
	Images  Images
	// Runtimes are the usable handlers by name.
	Runtimes map[string]runtime.Runtime
}

// Collect releases every resource of h that no record owns. owned returns
// the IDs of every record; it is called after the resources are listed,
// so that what belongs to a pod made meanwhile is safe (a pod's record is
// persisted before any of its resources is made). What cannot be released
// is logged, and the rest goes on.
func Collect(ctx context.Context, h Host, owned func() (map[string]bool, error)) {
	l := listHeld(ctx, h)
	ids, err := owned()
	if err != nil {
		log.G(ctx).Error("garbage collection skipped: read records", "err", err)
		return
	}
	// The runtimes first: a pod whose record is gone may still have its
	// sandbox container, whose process keeps the namespace in use, and a
	// root filesystem must not be removed under a running container.
	collectRuntimes(ctx, h.Runtimes, l.runtimeIDs, ids, l.namespaces, l.rootfses, dirNames(l.dirs), dirNames(l.ctrDirs), dirNames(l.bundleDirs))
	collectNetwork(ctx, h, l, ids)
	collectPodParts(ctx, h, l, ids)
	collectImageVolumes(ctx, h.Images)
	collectDirs(ctx, h, l, ids)
}

// held is what podbay holds on the host, listed before the records are
// read: what is made after the listing is never taken for garbage.
type held struct {
	cached                    []network.CachedAttachment
	namespaces                []string
	pinDirs, shmDirs          []string
	rootfses                  []string
	dirs, ctrDirs, bundleDirs []os.DirEntry
	runtimeIDs                map[string][]runtime.State
}

// listHeld lists what podbay holds on the host; a listing that fails is
// logged and left empty.
func listHeld(ctx context.Context, h Host) held {
	var l held
	var err error
	if l.cached, err = h.Network.Cached(); err != nil {
		log.G(ctx).Error("list cached CNI attachments", "err", err)
	}
	if l.namespaces, err = h.NetNS.List(h.NetNSDir); err != nil {
		log.G(ctx).Error("list network namespaces", "err", err)
	}
	if h.PinRoot != "" {
		if l.pinDirs, err = subdirs(h.PinRoot); err != nil {
			log.G(ctx).Error("list pinned pod namespaces", "err", err)
		}
	}
	if h.ShmRoot != "" {
		if l.shmDirs, err = subdirs(h.ShmRoot); err != nil {
			log.G(ctx).Error("list pod shm mounts", "err", err)
		}
	}
	if l.rootfses, err = h.Images.Rootfses(ctx); err != nil {
		log.G(ctx).Error("list root filesystems", "err", err)
	}
	l.dirs, _ = os.ReadDir(filepath.Join(h.Root, "sandboxes"))
	l.ctrDirs, _ = os.ReadDir(filepath.Join(h.Root, "containers"))
	if h.BundleRoot != "" {
		l.bundleDirs, _ = os.ReadDir(h.BundleRoot)
	}
	l.runtimeIDs = listRuntimeContainers(ctx, h)
	return l
}

// collectNetwork releases the CNI attachments and network namespaces of
// l that no record owns.
func collectNetwork(ctx context.Context, h Host, l held, ids map[string]bool) {
	// CNI first: the bridge plugin finds what to release (its masquerade
	// rules) through the namespace, which must still be mounted.
	for _, c := range l.cached {
		if ids[c.ID] {
			continue
		}
		if err := h.Network.TeardownCached(ctx, c); err != nil {
			log.G(ctx).Error("release orphaned CNI attachment", "pod", c.ID, "err", err)
		} else {
			log.G(ctx).Info("released orphaned CNI attachment", "pod", c.ID)
		}
	}
	for _, id := range l.namespaces {
		if ids[id] || !objectid.Is(id) {
			continue
		}
		// A namespace a live process is in is not garbage: releasing the
		// mount frees nothing, and the process may belong to another
		// daemon sharing this dir (which is not supported, but must not
		// break running pods).
		path := netns.Path(h.NetNSDir, id)
		if inUse, err := h.NetNS.InUse(path); err != nil || inUse {
			log.G(ctx).Warn("not removing unowned network namespace that a process is in", "pod", id, "err", err)
			continue
		}
		if err := h.NetNS.Remove(path); err != nil {
			log.G(ctx).Error("remove orphaned network namespace", "pod", id, "err", err)
		} else {
			log.G(ctx).Info("removed orphaned network namespace", "pod", id)
		}
	}
}

// collectPodParts releases the pinned namespaces, shm mounts and root
// filesystems of l that no record owns.
func collectPodParts(ctx context.Context, h Host, l held, ids map[string]bool) {
	// A pod's pinned IPC and UTS namespaces hold nothing CNI needs.
	for _, id := range l.pinDirs {
		if ids[id] || !objectid.Is(id) {
			continue
		}
		if err := podns.Remove(podns.Dir(h.PinRoot, id)); err != nil {
			log.G(ctx).Error("remove orphaned pinned namespaces", "pod", id, "err", err)
		} else {
			log.G(ctx).Info("removed orphaned pinned namespaces", "pod", id)
		}
	}
	// After the runtimes: no container of the pod is left to use it.
	for _, id := range l.shmDirs {
		if ids[id] || !objectid.Is(id) {
			continue
		}
		if err := podshm.Remove(podshm.Dir(h.ShmRoot, id)); err != nil {
			log.G(ctx).Error("remove orphaned pod shm", "pod", id, "err", err)
		} else {
			log.G(ctx).Info("removed orphaned pod shm", "pod", id)
		}
	}
	for _, id := range l.rootfses {
		if ids[id] {
			continue
		}
		if err := h.Images.RemoveRootfs(ctx, id); err != nil {
			log.G(ctx).Error("remove orphaned root filesystem", "pod", id, "err", err)
		} else {
			log.G(ctx).Info("removed orphaned root filesystem", "pod", id)
		}
	}
}

// collectDirs removes the sandbox, container and bundle directories of l
// that no record owns.
func collectDirs(ctx context.Context, h Host, l held, ids map[string]bool) {
	for _, d := range l.dirs {
		if !ids[d.Name()] {
			if err := os.RemoveAll(filepath.Join(h.Root, "sandboxes", d.Name())); err != nil {
				log.G(ctx).Error("remove orphaned sandbox dir", "pod", d.Name(), "err", err)
			}
		}
	}
	for _, d := range l.ctrDirs {
		if !ids[d.Name()] && objectid.Is(d.Name()) {
			if err := os.RemoveAll(filepath.Join(h.Root, "containers", d.Name())); err != nil {
				log.G(ctx).Error("remove orphaned container dir", "container", d.Name(), "err", err)
			}
		}
	}
	// After the runtimes: conmon's files are in the bundle, and runc
	// deletes a container from its state, which names the bundle.
	for _, d := range l.bundleDirs {
		if !ids[d.Name()] && objectid.Is(d.Name()) {
			if err := os.RemoveAll(filepath.Join(h.BundleRoot, d.Name())); err != nil {
				log.G(ctx).Error("remove orphaned bundle dir", "id", d.Name(), "err", err)
			}
		}
	}
}

// collectImageVolumes unmounts the image volumes no container holds (a
// crash between a container's removal and the release of its volumes).
func collectImageVolumes(ctx context.Context, images Images) {
	unmounted, err := images.CollectVolumes(ctx)
	if err != nil {
		log.G(ctx).Error("collect image volumes", "err", err)
	}
	if len(unmounted) > 0 {
		log.G(ctx).Info("unmounted image volumes no container holds", "images", unmounted)
	}
}

// dirNames are the names of entries.
func dirNames(entries []os.DirEntry) []string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

// subdirs returns the names of root's subdirectories (pod IDs, under the
// pin and shm roots); a missing root has none.
func subdirs(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
