package server

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// PreparePauseRootfs makes the read-only root filesystem every sandbox
// container runs from: the static pause program at /pause and the mount
// points the runtime and the sandbox's bind mounts need. It is rebuilt only
// when the pause binary changed, and replaced atomically so running
// sandboxes keep theirs.
func PreparePauseRootfs(root, pauseBinary string) (string, error) {
	want, err := os.ReadFile(pauseBinary)
	if err != nil {
		return "", fmt.Errorf("read pause binary: %w", err)
	}
	dir := filepath.Join(root, "pause")
	rootfs := filepath.Join(dir, "rootfs")
	if have, err := os.ReadFile(filepath.Join(rootfs, "pause")); err == nil && bytes.Equal(have, want) {
		return rootfs, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create pause dir: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, "rootfs-")
	if err != nil {
		return "", fmt.Errorf("create pause rootfs: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{"proc", "dev", "sys", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	for _, f := range []string{"etc/resolv.conf", "etc/hostname", "etc/hosts"} {
		if err := os.WriteFile(filepath.Join(tmp, f), nil, 0o644); err != nil {
			return "", err
		}
	}
	if err := copyFile(pauseBinary, filepath.Join(tmp, "pause"), 0o755); err != nil {
		return "", err
	}
	// A running sandbox holds the old rootfs by path; move it aside rather
	// than deleting under it, and drop it once unused at the next change.
	old := filepath.Join(dir, "rootfs.old")
	_ = os.RemoveAll(old)
	if _, err := os.Stat(rootfs); err == nil {
		if err := os.Rename(rootfs, old); err != nil {
			return "", fmt.Errorf("replace pause rootfs: %w", err)
		}
	}
	if err := os.Rename(tmp, rootfs); err != nil {
		return "", fmt.Errorf("install pause rootfs: %w", err)
	}
	return rootfs, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
