//go:build tools

// Package tools pins the tools podbay is tested with: crictl and critest
// from cri-tools (the CRI conformance tools), and runc, whose 1.2+ releases
// make idmapped mounts (user-namespaced pods) where Debian 12's runc 1.1.5
// does not. It is a separate module so that their dependencies stay out of
// podbay's go.mod; hack/critest.sh builds crictl and critest from here, the
// integration tests (test/integration/main_test.go) and hack/critest.sh
// build runc.
package tools

import (
	_ "github.com/opencontainers/runc"
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
	_ "sigs.k8s.io/cri-tools/cmd/critest"
)
