// Package annotations names every annotation key podbay reads or writes:
// the pod annotations that choose how a pod's network is set up, and the
// annotations podbay writes into each OCI spec so that a VM runtime (Kata)
// can tell a sandbox from its containers and size the pod's VM. It also
// decides which of a pod's own annotations may reach an OCI spec (Allowed):
// what a pod author writes is input, not runtime configuration.
package annotations

import (
	"path"
	"strings"
)

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

// Namespaces no pod may write into an OCI spec: the keys of the runtime
// stack itself, which a runtime acts on or a VM runtime trusts to tell a
// sandbox from its containers. A pod or container annotation in one of
// them never reaches a spec, whatever a handler's allow-list says, and an
// NRI plugin may not set or remove one either; podbay writes its own
// keys (io.kubernetes.cri.*) last.
//
// Each entry is a key prefix; the prefix without its final "." or "/" is
// reserved as a key too.
var reservedPrefixes = []string{
	"io.kubernetes.cri.",    // containerd's and podbay's own keys (Kata and gVisor read them)
	"io.kubernetes.cri-o.",  // CRI-O's: Kata and gVisor read them as well to find the sandbox
	"io.containerd.",        // containerd's internal keys
	"org.systemd.property.", // runc: properties of the container's systemd unit (CVE-2024-3154)
	"org.criu.",             // runc: org.criu.config, a CRIU config file on checkpoint/restore
	"org.opencontainers.runc.",
	"run.oci.",   // crun: handlers, hooks' output, seccomp, cgroup delegation, keep groups
	"podbay.io/", // podbay's own pod annotations are read by podbay, not passed on
}

// Namespaces of runtime-specific knobs a pod may set only where the
// operator allowed them by name: a handler pattern that starts with the
// namespace ("io.katacontainers.config.hypervisor.default_vcpus",
// "io.katacontainers.*"); a bare "*" does not open them.
var optInPrefixes = []string{
	"io.katacontainers.", // Kata: hypervisor, kernel, agent and resource overrides
	"dev.gvisor.",        // gVisor: mount hints, flag overrides
	"module.wasm.image/", // crun: run the container through a Wasm handler
	"cdi.k8s.io/",        // CDI device requests (read from the CRI config, not from the spec)
}

// Reserved reports whether key is in a namespace no pod may write into an
// OCI spec.
func Reserved(key string) bool {
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(key, p) || key == strings.TrimRight(p, "./") {
			return true
		}
	}
	return false
}

// optIn returns the opt-in namespace key is in, or "".
func optIn(key string) string {
	for _, p := range optInPrefixes {
		if strings.HasPrefix(key, p) {
			return p
		}
	}
	return ""
}

// ReservedPattern reports whether pattern can match only reserved keys: a
// handler allow-list entry that would do nothing.
func ReservedPattern(pattern string) bool {
	lit := pattern
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		lit = pattern[:i]
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(lit, p) {
			return true
		}
	}
	return false
}

// CheckPattern reports a malformed allow-list pattern.
func CheckPattern(pattern string) error {
	_, err := path.Match(pattern, "")
	return err
}

// Allowed returns the annotations of in that a handler's allow-list
// (containerd's pod_annotations and container_annotations, CRI-O's
// allowed_annotations) lets into an OCI spec: keys that match one of
// patterns and are not reserved, and, in an opt-in namespace, only through
// a pattern that names that namespace. Patterns are path.Match globs,
// except that "*" also matches "/" (keys are "prefix/name"), so "*" is
// every key outside the reserved and opt-in namespaces. No patterns, no
// annotations.
func Allowed(patterns []string, in map[string]string) map[string]string {
	out := map[string]string{}
	if len(patterns) == 0 {
		return out
	}
	for k, v := range in {
		if AllowedKey(patterns, k) {
			out[k] = v
		}
	}
	return out
}

// AllowedKey reports whether key passes Allowed's rule for patterns.
func AllowedKey(patterns []string, key string) bool {
	if Reserved(key) {
		return false
	}
	ns := optIn(key)
	k := strings.ReplaceAll(key, "/", "\x00")
	for _, p := range patterns {
		if ns != "" && !strings.HasPrefix(p, ns) {
			continue
		}
		if ok, _ := path.Match(strings.ReplaceAll(p, "/", "\x00"), k); ok {
			return true
		}
	}
	return false
}
