//go:build tools

// Package tools pins the CRI conformance tools podbay is tested with:
// crictl and critest from cri-tools. It is a separate module so that their
// dependencies stay out of podbay's go.mod; hack/critest.sh builds them from
// here.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
	_ "sigs.k8s.io/cri-tools/cmd/critest"
)
