package server

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/podbay/podbay/internal/errdefs"
)

// lowDiskSpace is the free space below which a runtime's unexplained
// failure is taken to be the full disk's doing.
const lowDiskSpace = 1 << 20

// runtimeFailure classifies a runtime's unclassified failure to create a
// container, made while the daemon's state or root directory (runtime
// state, bundles) is all but full, as a full disk. Runtimes report a write
// that failed in their own words — runc even loses the errno ("unable to
// store init state") — so the error alone cannot tell.
func (s *Server) runtimeFailure(err error) error {
	return diskFullCause(err, []string{s.cfg.State, s.cfg.Root}, freeBytes)
}

// diskFullCause wraps err with ENOSPC, naming the directory, if err has no
// class and one of dirs has less than lowDiskSpace free.
func diskFullCause(err error, dirs []string, free func(dir string) (uint64, error)) error {
	if err == nil || errdefs.Code(err) != codes.Unknown {
		return err
	}
	for _, dir := range dirs {
		if n, ferr := free(dir); ferr == nil && n < lowDiskSpace {
			return fmt.Errorf("%w (%s has %d KiB free: %w)", err, dir, n>>10, syscall.ENOSPC)
		}
	}
	return err
}

// freeBytes is the space available to the daemon on dir's file system.
func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
