package image

import "go.podman.io/storage/pkg/reexec"

// ReexecInit must be the first thing podbayd's main does:
//
//	if image.ReexecInit() {
//		return
//	}
//
// containers/storage does chrooted work (unpacking with drivers other than
// overlay, whose layers unpack in process, see unpack.go; layer diffs) in a
// child process that runs the daemon's own binary; in that child
// ReexecInit runs the work and returns true. Without it such work panics.
func ReexecInit() bool {
	return reexec.Init()
}
