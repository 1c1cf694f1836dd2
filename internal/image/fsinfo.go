package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// FsUsage is the disk usage of a directory tree.
type FsUsage struct {
	Timestamp time.Time
	// Mountpoint is the directory measured.
	Mountpoint string
	// UsedBytes counts allocated blocks, each hard-linked file once.
	UsedBytes  uint64
	InodesUsed uint64
}

// FsInfo returns the usage of the image filesystem: everything under the
// graph root (image layers, container layers, metadata). Mounted container
// root filesystems under it are not entered, so nothing is counted twice.
func (s *Store) FsInfo(ctx context.Context) (FsUsage, error) {
	return diskUsage(s.store.GraphRoot())
}

// diskUsage walks root without crossing into other filesystems.
func diskUsage(root string) (FsUsage, error) {
	usage := FsUsage{Timestamp: time.Now(), Mountpoint: root}
	st, err := os.Lstat(root)
	if err != nil {
		return usage, fmt.Errorf("disk usage of %s: %w", root, err)
	}
	rootDev := st.Sys().(*syscall.Stat_t).Dev
	seen := make(map[uint64]bool)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// Layers come and go while we walk.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		sys := info.Sys().(*syscall.Stat_t)
		if sys.Dev != rootDev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if seen[sys.Ino] {
			return nil
		}
		seen[sys.Ino] = true
		usage.InodesUsed++
		usage.UsedBytes += uint64(sys.Blocks) * 512
		return nil
	})
	if err != nil {
		return usage, fmt.Errorf("disk usage of %s: %w", root, err)
	}
	return usage, nil
}
