// Package checkpoint writes and reads container checkpoint archives in the
// layout CRI-O and Podman use (github.com/checkpoint-restore/checkpointctl's
// metadata: the same file names and config.dump fields):
//
//	checkpoint/       CRIU's image files (runc checkpoint --image-path)
//	config.dump       ContainerConfig: the container's name, IDs, image, times
//	spec.dump         the container's OCI runtime spec (its config.json)
//	rootfs-diff.tar   the files the container added or changed in its root
//	                  filesystem, relative to the image
//	deleted.files     JSON list of the image's files the container deleted
//	dump.log, stats-dump  CRIU's log and statistics of the dump
//
// The archive is a tar file, gzip-compressed when its name ends in .gz or
// .tgz. Write makes it next to its destination and renames it into place,
// so a failure leaves no partial archive.
package checkpoint

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// Names in a checkpoint archive (checkpointctl's metadata package).
const (
	CheckpointDirectory = "checkpoint"
	ConfigDumpFile      = "config.dump"
	SpecDumpFile        = "spec.dump"
	RootFsDiffTar       = "rootfs-diff.tar"
	DeletedFilesFile    = "deleted.files"
	DumpLogFile         = "dump.log"
	RestoreLogFile      = "restore.log"
	StatsDumpFile       = "stats-dump"
)

// ContainerConfig is config.dump, with checkpointctl's field names.
type ContainerConfig struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	RootfsImage     string    `json:"rootfsImage,omitempty"`
	RootfsImageRef  string    `json:"rootfsImageRef,omitempty"`
	RootfsImageName string    `json:"rootfsImageName,omitempty"`
	OCIRuntime      string    `json:"runtime,omitempty"`
	CreatedTime     time.Time `json:"createdTime"`
	CheckpointedAt  time.Time `json:"checkpointedTime"`
	RestoredAt      time.Time `json:"restoredTime"`
	Restored        bool      `json:"restored"`
}

// Compressed reports whether an archive at location is gzip-compressed.
func Compressed(location string) bool {
	return strings.HasSuffix(location, ".gz") || strings.HasSuffix(location, ".tgz")
}

// Write makes the archive at location from the directory dir, whose
// top-level entries become the archive's. The archive is written to a
// temporary file in location's directory and renamed into place; on any
// failure nothing is left at location (an existing file there is kept).
func Write(location, dir string) (retErr error) {
	if !filepath.IsAbs(location) {
		return fmt.Errorf("checkpoint location %q is not an absolute path: %w", location, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(location); err == nil && fi.IsDir() {
		return fmt.Errorf("checkpoint location %q is a directory: %w", location, errdefs.ErrInvalidArgument)
	}
	tmp, err := os.CreateTemp(filepath.Dir(location), "."+filepath.Base(location)+".tmp-")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checkpoint location %q: directory %s: %w", location, filepath.Dir(location), errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("create checkpoint archive: %w", err)
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	var w io.Writer = bw
	var gz *gzip.Writer
	if Compressed(location) {
		gz = gzip.NewWriter(bw)
		w = gz
	}
	tw := tar.NewWriter(w)
	if err := addTree(tw, dir); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return fmt.Errorf("write checkpoint archive: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	return os.Rename(tmp.Name(), location)
}

// addTree adds the regular files, directories and symlinks under dir, with
// names relative to dir.
func addTree(tw *tar.Writer, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // CRIU leaves no sockets or fifos in its images
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}

// Open opens an archive for reading, gzip-compressed or not (told by its
// first bytes, not its name).
func Open(location string) (*tar.Reader, io.Closer, error) {
	f, err := os.Open(location)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("checkpoint archive %s: %w: %w", location, err, errdefs.ErrInvalidArgument)
		}
		return tar.NewReader(gz), f, nil
	}
	return tar.NewReader(br), f, nil
}

// Extract unpacks the archive at location into dir (which must exist) and
// checks that it holds what a restore needs: spec.dump, config.dump and the
// checkpoint directory. Entries that would leave dir, and entry types other
// than files, directories and symlinks, are refused. An archive that is
// not a checkpoint gives ErrInvalidArgument.
func Extract(location, dir string) (*ContainerConfig, error) {
	tr, closer, err := Open(location)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint archive %s: %w: %w", location, err, errdefs.ErrInvalidArgument)
		}
		name, ok := cleanName(hdr.Name)
		if !ok {
			return nil, fmt.Errorf("checkpoint archive %s: entry %q leaves the archive: %w", location, hdr.Name, errdefs.ErrInvalidArgument)
		}
		if name == "" {
			continue
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := writeFile(target, tr, fs.FileMode(hdr.Mode)&0o777); err != nil {
				return nil, fmt.Errorf("checkpoint archive %s: %s: %w", location, name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("checkpoint archive %s: entry %q of type %q: %w", location, hdr.Name, hdr.Typeflag, errdefs.ErrInvalidArgument)
		}
	}
	for _, need := range []string{SpecDumpFile, ConfigDumpFile, CheckpointDirectory} {
		if _, err := os.Lstat(filepath.Join(dir, need)); err != nil {
			return nil, fmt.Errorf("%s is not a checkpoint archive: it has no %s: %w", location, need, errdefs.ErrInvalidArgument)
		}
	}
	var cfg ContainerConfig
	if err := readJSON(filepath.Join(dir, ConfigDumpFile), &cfg); err != nil {
		return nil, fmt.Errorf("checkpoint archive %s: %w: %w", location, err, errdefs.ErrInvalidArgument)
	}
	return &cfg, nil
}

// cleanName returns an archive entry's name relative to the archive's
// root, and false when it would leave it.
func cleanName(name string) (string, bool) {
	c := path.Clean("/" + name)
	if c == "/" {
		return "", true
	}
	if strings.Contains(name, "\x00") {
		return "", false
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", false
		}
	}
	return strings.TrimPrefix(c, "/"), true
}

func writeFile(target string, r io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteJSON writes v as JSON to path.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// ReadJSON reads the JSON file name of an extracted archive in dir.
func ReadJSON(dir, name string, v any) error {
	return readJSON(filepath.Join(dir, name), v)
}

// IsArchive reports whether a CreateContainer image names a checkpoint
// archive on the host (CRI-O's convention): an absolute path to a regular
// file. Image references are never absolute paths.
func IsArchive(image string) bool {
	if !filepath.IsAbs(image) {
		return false
	}
	fi, err := os.Stat(image)
	return err == nil && fi.Mode().IsRegular()
}

// ReadMeta reads config.dump and spec.dump from the archive at location
// without unpacking the rest. An archive without them gives
// ErrInvalidArgument.
func ReadMeta(location string) (*ContainerConfig, []byte, error) {
	tr, closer, err := Open(location)
	if err != nil {
		return nil, nil, err
	}
	defer closer.Close()
	var cfgRaw, spec []byte
	for cfgRaw == nil || spec == nil {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint archive %s: %w: %w", location, err, errdefs.ErrInvalidArgument)
		}
		name, _ := cleanName(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || (name != ConfigDumpFile && name != SpecDumpFile) {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 16<<20))
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint archive %s: %w: %w", location, err, errdefs.ErrInvalidArgument)
		}
		if name == ConfigDumpFile {
			cfgRaw = b
		} else {
			spec = b
		}
	}
	if cfgRaw == nil || spec == nil {
		return nil, nil, fmt.Errorf("%s is not a checkpoint archive: it has no %s or %s: %w", location, ConfigDumpFile, SpecDumpFile, errdefs.ErrInvalidArgument)
	}
	var cfg ContainerConfig
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		return nil, nil, fmt.Errorf("checkpoint archive %s: %s: %w: %w", location, ConfigDumpFile, err, errdefs.ErrInvalidArgument)
	}
	return &cfg, spec, nil
}
