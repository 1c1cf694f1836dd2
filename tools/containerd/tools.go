//go:build tools

// Package tools pins containerd 2.4 — the runtime cluster operators pick
// today — as podbay's anchor: hack/e2e-node.sh runs Kubernetes' node e2e
// suite against it beside podbayd (E2E_NODE_RUNTIME=containerd), and
// hack/bench-compare.sh can measure against it. Built from the Go module
// proxy: containerd and containerd-shim-runc-v2, with the tags
// no_btrfs,no_devmapper,no_zfs,no_aufs (no graph drivers this host lacks the
// C libraries for). A module of its own, so that containerd's dependencies
// stay out of podbay's go.mod and out of tools/.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
