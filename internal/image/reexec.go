package image

import "github.com/containers/storage/pkg/reexec"

// ReexecInit must be the first thing podbayd's main does:
//
//	if image.ReexecInit() {
//		return
//	}
//
// containers/storage unpacks layers in a chrooted child process that runs
// the daemon's own binary; in that child ReexecInit runs the unpacking and
// returns true. Without it the first pull panics.
func ReexecInit() bool {
	return reexec.Init()
}
