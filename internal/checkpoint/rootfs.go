package checkpoint

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ChangeKind is what happened to a path of a container's root filesystem
// since its image.
type ChangeKind int

// Kinds of change (the values of c/storage's archive.ChangeType).
const (
	Modified ChangeKind = iota
	Added
	Deleted
)

// Change is one changed path, absolute within the root filesystem.
type Change struct {
	Path string
	Kind ChangeKind
}

// WriteRootfsDiff writes, from the mounted root filesystem rootfs, the
// added and modified paths of changes to rootfs-diff.tar in dir and the
// deleted ones to deleted.files (a JSON list), as CRI-O does. Ownership,
// modes, times and symlink targets are kept.
func WriteRootfsDiff(dir, rootfs string, changes []Change) (retErr error) {
	var deleted []string
	var changed []string
	for _, c := range changes {
		p := filepath.Clean("/" + c.Path)
		if p == "/" {
			continue
		}
		if c.Kind == Deleted {
			deleted = append(deleted, p)
		} else {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed)
	f, err := os.OpenFile(filepath.Join(dir, RootFsDiffTar), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range changed {
		if err := addRootfsPath(tw, rootfs, p); err != nil {
			return fmt.Errorf("rootfs diff: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if len(deleted) == 0 {
		return nil
	}
	sort.Strings(deleted)
	return WriteJSON(filepath.Join(dir, DeletedFilesFile), deleted)
}

func addRootfsPath(tw *tar.Writer, rootfs, p string) error {
	full := filepath.Join(rootfs, p)
	info, err := os.Lstat(full)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since the changes were listed
	}
	if err != nil {
		return err
	}
	var link string
	if info.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(full); err != nil {
			return err
		}
	}
	if info.Mode()&fs.ModeSocket != 0 {
		return nil // tar cannot hold sockets; CRIU recreates bound ones
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = strings.TrimPrefix(p, "/")
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	hdr.Format = tar.FormatPAX
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(full)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, hdr.Size)
	return err
}

// ApplyRootfsDiff applies an extracted archive's rootfs-diff.tar and
// deleted.files (in dir) to the root filesystem rootfs: the files the
// checkpointed container added or changed are written with their
// ownership and modes, then the ones it deleted are removed. An archive
// without them (no changes) is not an error. No entry may leave rootfs.
func ApplyRootfsDiff(dir, rootfs string) error {
	f, err := os.Open(filepath.Join(dir, RootFsDiffTar))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		defer f.Close()
		if err := untarInto(tar.NewReader(f), rootfs); err != nil {
			return fmt.Errorf("apply %s: %w", RootFsDiffTar, err)
		}
	}
	var deleted []string
	if err := ReadJSON(dir, DeletedFilesFile, &deleted); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, p := range deleted {
		name, ok := cleanName(p)
		if !ok || name == "" {
			return fmt.Errorf("%s: path %q leaves the root filesystem", DeletedFilesFile, p)
		}
		// RemoveAll follows symlinks in the parents: one the rootfs holds
		// ("out -> /") would take a host file.
		if err := realParents(rootfs, name); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("%s: %w", DeletedFilesFile, err)
		}
		if err := os.RemoveAll(filepath.Join(rootfs, name)); err != nil {
			return fmt.Errorf("apply %s: %w", DeletedFilesFile, err)
		}
	}
	return nil
}

// untarInto extracts tr into root. Symlinks in root are not followed: each
// entry's parent must be a real directory below root.
func untarInto(tr *tar.Reader, root string) error {
	var dirs []*tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, ok := cleanName(hdr.Name)
		if !ok {
			return fmt.Errorf("entry %q leaves the root filesystem", hdr.Name)
		}
		if name == "" {
			continue
		}
		if err := checkParents(root, name); err != nil {
			return err
		}
		target := filepath.Join(root, filepath.FromSlash(name))
		if hdr.Typeflag != tar.TypeDir {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		switch hdr.Typeflag {
		case tar.TypeDir:
			if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
				if err := os.Remove(target); err != nil {
					return err
				}
			}
			if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, hdr)
		case tar.TypeReg:
			if err := writeFile(target, tr, 0o600); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			src, ok := cleanName(hdr.Linkname)
			if !ok || src == "" {
				return fmt.Errorf("hard link %q leaves the root filesystem", hdr.Linkname)
			}
			// link(2) follows symlinks in the source's parents.
			if err := realParents(root, src); err != nil {
				return fmt.Errorf("hard link %q: %w", hdr.Linkname, err)
			}
			if err := os.Link(filepath.Join(root, src), target); err != nil {
				return err
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			m := uint32(mode)
			switch hdr.Typeflag {
			case tar.TypeChar:
				m |= syscall.S_IFCHR
			case tar.TypeBlock:
				m |= syscall.S_IFBLK
			default:
				m |= syscall.S_IFIFO
			}
			if err := unix.Mknod(target, m, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q of type %q", hdr.Name, hdr.Typeflag)
		}
		if hdr.Typeflag != tar.TypeDir {
			if err := setAttrs(target, hdr); err != nil {
				return err
			}
		}
	}
	// Directories last: their files changed their times.
	for i := len(dirs) - 1; i >= 0; i-- {
		name, _ := cleanName(dirs[i].Name)
		if err := setAttrs(filepath.Join(root, filepath.FromSlash(name)), dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// checkParents refuses an entry whose parent directories below root are
// not directories (a symlink could lead out of root), making those that
// are missing.
func checkParents(root, name string) error {
	return walkParents(root, name, func(dir string) error { return os.Mkdir(dir, 0o755) })
}

// realParents refuses name when one of its parent directories below root
// is not a real directory (a symlink could lead out of root); unlike
// checkParents it makes nothing. A missing parent is fs.ErrNotExist.
func realParents(root, name string) error {
	return walkParents(root, name, nil)
}

// walkParents checks that each parent directory of name below root is a
// real directory. A missing one is made by mkdir, or, without mkdir, is
// the error.
func walkParents(root, name string, mkdir func(dir string) error) error {
	dir := root
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) && mkdir != nil {
			if err := mkdir(dir); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%q: %s is not a directory", name, dir)
		}
	}
	return nil
}

func setAttrs(target string, hdr *tar.Header) error {
	if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeSymlink {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		return unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	// After chown, which clears set-id bits.
	if err := os.Chmod(target, hdr.FileInfo().Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	mtime := hdr.ModTime
	if mtime.IsZero() {
		mtime = time.Now()
	}
	return os.Chtimes(target, mtime, mtime)
}
