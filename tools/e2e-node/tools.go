//go:build tools

// Package tools pins what hack/e2e-node.sh builds to run Kubernetes' node
// e2e suite (test/e2e_node) against podbayd: the kubelet, the ginkgo CLI
// (the version k8s.io/kubernetes requires), the e2e_node test binary and
// agnhost (the test images' program; hack/e2e-node.sh builds it static), all
// from k8s.io/kubernetes v1.37.2. A module of its own, so that Kubernetes'
// dependencies stay out of podbay's go.mod (and out of tools/).
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e_node"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
