// Package podshm mounts the /dev/shm that the containers of one pod share,
// as containerd (<state>/sandboxes/<id>/shm) and CRI-O (<run>/userdata/shm)
// do: a tmpfs per pod with a private IPC namespace, at <root>/<id>, which
// the pod's sandbox and containers bind at /dev/shm, so that POSIX shared
// memory (shm_open, files in /dev/shm) works across them. Only a sandbox on
// the node's kernel can share a tmpfs of the node's; a VM has its own
// /dev/shm.
//
// Unmount (StopPodSandbox) releases the tmpfs and keeps the directory;
// Remove deletes it. Both are idempotent.
package podshm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultSize is containerd's and CRI-O's size limit (and that of the
// per-container /dev/shm of podbay's base spec); podbayd's is shm_size.
const DefaultSize = 64 << 20

// Root is the directory of every pod's shm under podbayd's state dir,
// a tmpfs that does not survive a reboot, as the mounts do not.
func Root(stateDir string) string { return filepath.Join(stateDir, "shm") }

// Dir is a pod's shm mount point.
func Dir(root, id string) string { return filepath.Join(root, id) }

// Flags and options are those of containerd's sandbox shm, and of the
// base spec's /dev/shm.
const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// Options are the tmpfs's mount data for a size in bytes (mode 1777: a
// user-namespaced pod's root, and any user, can make files in it).
func Options(size int64) string {
	return fmt.Sprintf("mode=1777,size=%dk", size>>10)
}

// Mount makes dir and mounts a tmpfs of size bytes on it. On error nothing
// is left mounted and dir is removed. A dir that is a mount point already
// is refused: it belongs to someone else.
func Mount(dir string, size int64) (err error) {
	if size <= 0 || size%1024 != 0 {
		return fmt.Errorf("pod shm size %d: must be a positive multiple of 1024", size)
	}
	// Each tmpfs is mode 1777, as /dev/shm is, for the pod's users; the
	// root keeps the node's other users out of it. runc opens a bind
	// mount's source before it enters a pod's user namespace, so a
	// user-namespaced pod needs no more.
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("create pod shm root: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create pod shm dir: %w", err)
	}
	if mounted, err := IsMounted(dir); err != nil {
		return err
	} else if mounted {
		return fmt.Errorf("mount pod shm %s: already mounted", dir)
	}
	defer func() {
		if err != nil {
			if rerr := Remove(dir); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := unix.Mount("shm", dir, "tmpfs", flags, Options(size)); err != nil {
		return fmt.Errorf("mount pod shm on %s: %w", dir, err)
	}
	return nil
}

// Unmount releases the pod's tmpfs, and whatever it holds, and keeps the
// directory. The detach is safe: when it is called, no process of the pod
// is left to use it. Idempotent: a dir missing or not mounted is not an
// error.
func Unmount(dir string) error {
	for {
		mounted, err := IsMounted(dir)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount pod shm %s: %w", dir, err)
		}
	}
}

// Remove unmounts and deletes the pod's shm dir. Idempotent.
func Remove(dir string) error {
	if err := Unmount(dir); err != nil {
		return err
	}
	// Remove (not RemoveAll): the dir is empty once unmounted, and a dir
	// still mounted fails (EBUSY) rather than having the tmpfs's files
	// deleted under a running pod.
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pod shm dir: %w", err)
	}
	return nil
}

// IsMounted reports whether something is mounted on dir: whether it is on
// another device than its parent. A missing dir is not mounted.
func IsMounted(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(dir), err)
	}
	return st.Dev != parent.Dev, nil
}
