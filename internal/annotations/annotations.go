// Package annotations names every annotation key podbay reads or writes:
// the pod annotations that choose how a pod's network is set up, and the
// annotations podbay writes into each OCI spec so that a VM runtime (Kata)
// can tell a sandbox from its containers and size the pod's VM.
package annotations

// Keys podbay writes into every OCI spec (config.json), as containerd and
// CRI-O do. The shim handler routes a container to its pod's shim by them.
const (
	// ContainerType is ContainerTypeSandbox in the sandbox's spec and
	// ContainerTypeContainer in its containers'.
	ContainerType = "io.kubernetes.cri.container-type"
	// SandboxID is the ID of the pod sandbox the spec belongs to.
	SandboxID = "io.kubernetes.cri.sandbox-id"
	// SandboxName is the pod's metadata name.
	SandboxName = "io.kubernetes.cri.sandbox-name"
	// SandboxNamespace is the pod's metadata namespace.
	SandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	// SandboxUID is the pod's metadata UID.
	SandboxUID = "io.kubernetes.cri.sandbox-uid"
	// SandboxLogDir is the pod's log directory (sandbox spec only).
	SandboxLogDir = "io.kubernetes.cri.sandbox-log-directory"
	// ContainerName is the container's metadata name (container specs).
	ContainerName = "io.kubernetes.cri.container-name"
	// ImageName is the image reference the kubelet asked for (container
	// specs).
	ImageName = "io.kubernetes.cri.image-name"
)

// Values of ContainerType.
const (
	// ContainerTypeSandbox marks the sandbox (pause) container's spec.
	ContainerTypeSandbox = "sandbox"
	// ContainerTypeContainer marks an application container's spec.
	ContainerTypeContainer = "container"
)

// The pod's resource totals, written into the sandbox's spec, from which a
// VM runtime (Kata) sizes the pod VM. Values are decimal integers.
const (
	// SandboxCPUPeriod is the pod's CPU CFS period in microseconds.
	SandboxCPUPeriod = "io.kubernetes.cri.sandbox-cpu-period"
	// SandboxCPUQuota is the pod's CPU CFS quota in microseconds.
	SandboxCPUQuota = "io.kubernetes.cri.sandbox-cpu-quota"
	// SandboxCPUShares is the pod's CPU shares.
	SandboxCPUShares = "io.kubernetes.cri.sandbox-cpu-shares"
	// SandboxMemory is the pod's memory limit in bytes.
	SandboxMemory = "io.kubernetes.cri.sandbox-memory"
)

// Pod annotations that choose a pod's network order: whether its network
// is set up before or after the sandbox container starts.
const (
	// NetworkSetupV2 is iSulad's key: "true" sets the network up before
	// the sandbox container starts.
	NetworkSetupV2 = "cri.sandbox.network.setup.v2"
	// NetworkOrder is podbay's own: "before" or "after".
	NetworkOrder = "podbay.io/network-order"
)

// Pod annotations that limit a pod's bandwidth through the CNI bandwidth
// capability, as the kubelet's kubenet did and containerd does. Values are
// Kubernetes quantities in bits per second ("10M").
const (
	// IngressBandwidth limits the traffic into the pod.
	IngressBandwidth = "kubernetes.io/ingress-bandwidth"
	// EgressBandwidth limits the traffic out of the pod.
	EgressBandwidth = "kubernetes.io/egress-bandwidth"
)
