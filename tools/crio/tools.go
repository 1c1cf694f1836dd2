//go:build tools

// Package tools pins CRI-O — with containerd 2.4 (tools/containerd) the
// runtime cluster operators pick today — as an anchor of
// hack/bench-compare.sh (ANCHORS=crio). Built from the Go module proxy
// (exact versions are served, the version list is not): crio with the tags
// containers_image_openpgp, containers_image_ostree_stub,
// exclude_graphdriver_btrfs, exclude_graphdriver_devicemapper and seccomp
// (libseccomp-dev), and pinns, C in the same module, with its Makefile. A
// module of its own, so that CRI-O's dependencies stay out of podbay's
// go.mod and out of tools/.
package tools

import (
	_ "github.com/cri-o/cri-o/cmd/crio"
)
