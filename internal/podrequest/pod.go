// Package podrequest owns the pod and container requests podbay acts on:
// the CRI's RunPodSandbox and CreateContainer configs turned, once, at the
// RPC boundary, into validated plain Go values (the user namespace and its
// ID mappings, port mappings, bandwidth, network order, sysctls,
// resources, security; a container's process, mounts, devices and stop
// signal), each with the description specgen builds its spec from. Everything below the RPC handlers reads these,
// and the records store them (JSON of these types) instead of the CRI's
// protobuf.
package podrequest

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/specgen"
)

// Version is the format version of a stored Pod or Container. A reader
// that finds a higher one knows the record is from a newer podbay.
const Version = 1

// Network orders (the same values as config.OrderBefore and
// config.OrderAfter).
const (
	OrderBefore = "before"
	OrderAfter  = "after"
)

// Namespace modes, the CRI's names.
const (
	NamespacePod       = "POD"
	NamespaceContainer = "CONTAINER"
	NamespaceNode      = "NODE"
	NamespaceTarget    = "TARGET"
)

// Metadata identifies a pod as the kubelet names it.
type Metadata struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Attempt   uint32 `json:"attempt"`
}

// Namespaces are the pod's namespace modes (NamespacePod, NamespaceNode…).
type Namespaces struct {
	Network string `json:"network"`
	PID     string `json:"pid"`
	IPC     string `json:"ipc"`
}

// PodSecurity is the pod's security context, as the pause process and
// the containers' privilege check read it.
type PodSecurity struct {
	Privileged         bool    `json:"privileged,omitempty"`
	RunAsUser          *int64  `json:"runAsUser,omitempty"`
	RunAsGroup         *int64  `json:"runAsGroup,omitempty"`
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`
}

// Pod is a validated RunPodSandbox request.
type Pod struct {
	Version  int      `json:"version"`
	Metadata Metadata `json:"metadata"`
	// RuntimeHandler is the handler the pod runs with ("" = the default).
	RuntimeHandler string `json:"runtimeHandler,omitempty"`
	Hostname       string `json:"hostname,omitempty"`
	// LogDirectory is where the containers' logs go ("" = no logs).
	LogDirectory string `json:"logDirectory,omitempty"`
	// DNS is the pod's resolver configuration; nil: the host's.
	DNS *network.DNS `json:"dns,omitempty"`
	// PortMappings are the mappings that publish a host port (one without
	// a host port publishes nothing, as in containerd).
	PortMappings []network.PortMapping `json:"portMappings,omitempty"`
	// Bandwidth is the pod's traffic shaping from its annotations; nil
	// for none, and always for a pod on the node's network.
	Bandwidth *network.Bandwidth `json:"bandwidth,omitempty"`
	// NetworkOrder is OrderBefore or OrderAfter.
	NetworkOrder string `json:"networkOrder"`
	// Labels and Annotations are the pod's, as the kubelet sent them
	// (status returns them); an OCI spec gets annotations only through
	// the handler's allow-list.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Namespaces  Namespaces        `json:"namespaces"`
	// UserNS is the pod's own user namespace (hostUsers: false); nil:
	// the host's.
	UserNS  *specgen.UserNamespace `json:"userNS,omitempty"`
	Sysctls map[string]string      `json:"sysctls,omitempty"`
	// CgroupParent is the parent the kubelet asked for ("" = the daemon's
	// default).
	CgroupParent string      `json:"cgroupParent,omitempty"`
	Security     PodSecurity `json:"security"`
	// Resources and Overhead are the pod's totals and overhead when the
	// kubelet sent them (updated by UpdatePodSandboxResources).
	Resources *specgen.Resources `json:"resources,omitempty"`
	Overhead  *specgen.Resources `json:"overhead,omitempty"`
}

// Options are what the daemon adds to a pod's request.
type Options struct {
	// RuntimeHandler is the handler the pod runs with.
	RuntimeHandler string
	// DefaultNetworkOrder is the handler's network order ("" = before),
	// used when the pod's annotations do not choose one.
	DefaultNetworkOrder string
}

// FromSandboxConfig validates cfg and returns the pod it asks for. A bad
// request is errdefs.ErrInvalidArgument, refused before anything is made.
func FromSandboxConfig(cfg *runtimeapi.PodSandboxConfig, opts Options) (*Pod, error) {
	if err := validateMetadata(cfg); err != nil {
		return nil, err
	}
	p, errs := convert(cfg, opts)
	if errs.userNS != nil {
		return nil, errs.userNS
	}
	// What the runtime would refuse at create, after the pod's network
	// and storage are made.
	if err := specgen.CheckSandbox(p.Sandbox()); err != nil {
		return nil, err
	}
	if err := validateNetwork(cfg); err != nil {
		return nil, err
	}
	if errs.bandwidth != nil {
		return nil, errs.bandwidth
	}
	if err := validatePortMappings(cfg.GetPortMappings()); err != nil {
		return nil, err
	}
	return p, nil
}

// FromStoredConfig converts the config of a record written before records
// held the Pod. It does not validate: that pod was accepted when it ran,
// and a rule added since must not reject it now; a part it cannot derive
// is left out.
func FromStoredConfig(cfg *runtimeapi.PodSandboxConfig, opts Options) *Pod {
	p, _ := convert(cfg, opts)
	return p
}

// FromPodConfigCopy converts the copy of its pod's config that the
// kubelet sends with CreateContainer. Only its user namespace is checked
// (the container joins it); the rest was validated when the pod ran.
func FromPodConfigCopy(cfg *runtimeapi.PodSandboxConfig, opts Options) (*Pod, error) {
	p, errs := convert(cfg, opts)
	if errs.userNS != nil {
		return nil, errs.userNS
	}
	return p, nil
}

// conversionErrors are the derivations convert could not make.
type conversionErrors struct {
	userNS, bandwidth error
}

// convert builds the pod of cfg, with what it could derive, and says
// which derivations failed.
func convert(cfg *runtimeapi.PodSandboxConfig, opts Options) (*Pod, conversionErrors) {
	md := cfg.GetMetadata()
	linux := cfg.GetLinux()
	sc := linux.GetSecurityContext()
	nsOpts := sc.GetNamespaceOptions()
	p := &Pod{
		Version:        Version,
		Metadata:       Metadata{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt()},
		RuntimeHandler: opts.RuntimeHandler,
		Hostname:       cfg.GetHostname(),
		LogDirectory:   cfg.GetLogDirectory(),
		PortMappings:   portMappings(cfg.GetPortMappings()),
		NetworkOrder:   networkOrder(cfg.GetAnnotations(), opts.DefaultNetworkOrder),
		Labels:         cfg.GetLabels(),
		Annotations:    cfg.GetAnnotations(),
		Namespaces: Namespaces{
			Network: nsOpts.GetNetwork().String(),
			PID:     nsOpts.GetPid().String(),
			IPC:     nsOpts.GetIpc().String(),
		},
		Sysctls:      linux.GetSysctls(),
		CgroupParent: linux.GetCgroupParent(),
		Security: PodSecurity{
			Privileged:         sc.GetPrivileged(),
			RunAsUser:          int64Ptr(sc.GetRunAsUser()),
			RunAsGroup:         int64Ptr(sc.GetRunAsGroup()),
			SupplementalGroups: sc.GetSupplementalGroups(),
		},
		Resources: ResourcesOf(linux.GetResources()),
		Overhead:  ResourcesOf(linux.GetOverhead()),
	}
	if d := cfg.GetDnsConfig(); d != nil {
		p.DNS = &network.DNS{Servers: d.GetServers(), Searches: d.GetSearches(), Options: d.GetOptions()}
	}
	var errs conversionErrors
	p.UserNS, errs.userNS = UserNamespace(nsOpts.GetUsernsOptions())
	if !p.HostNetwork() {
		// Like containerd, only for pods CNI runs for: a host-network pod
		// is not shaped.
		p.Bandwidth, errs.bandwidth = PodBandwidth(cfg.GetAnnotations())
	}
	return p, errs
}

// HostNetwork reports whether the pod shares the node's network.
func (p *Pod) HostNetwork() bool { return p.Namespaces.Network == NamespaceNode }

// HostPID reports whether the pod shares the node's PID namespace.
func (p *Pod) HostPID() bool { return p.Namespaces.PID == NamespaceNode }

// HostIPC reports whether the pod shares the node's IPC namespace.
func (p *Pod) HostIPC() bool { return p.Namespaces.IPC == NamespaceNode }

// Sandbox is specgen's description of the pod's sandbox, with what the
// request says; the caller adds what the daemon made (ID, rootfs, netns,
// files, cgroup, capabilities, allowed annotations).
func (p *Pod) Sandbox() specgen.Sandbox {
	desc := specgen.Sandbox{
		Name:               p.Metadata.Name,
		Namespace:          p.Metadata.Namespace,
		UID:                p.Metadata.UID,
		LogDir:             p.LogDirectory,
		Hostname:           p.Hostname,
		HostNetwork:        p.HostNetwork(),
		HostPID:            p.HostPID(),
		HostIPC:            p.HostIPC(),
		Sysctls:            p.Sysctls,
		RunAsUser:          p.Security.RunAsUser,
		RunAsGroup:         p.Security.RunAsGroup,
		SupplementalGroups: p.Security.SupplementalGroups,
		Privileged:         p.Security.Privileged,
		UserNS:             p.UserNS,
	}
	if r := p.Resources; r != nil {
		desc.HasResources = true
		desc.CPUShares = r.CPUShares
		desc.CPUQuota = r.CPUQuota
		desc.CPUPeriod = r.CPUPeriod
		desc.MemoryLimit = r.MemoryLimit
	}
	return desc
}

// NetworkOrderFromAnnotation reports whether the pod's own annotation
// chose the network order "after" (for the message that names it).
func (p *Pod) NetworkOrderFromAnnotation() bool {
	return p.Annotations[annotations.NetworkOrder] == OrderAfter
}

// networkOrder picks the pod's network order: iSulad's annotation, then
// podbay's, then the handler's default.
func networkOrder(podAnnotations map[string]string, handlerDefault string) string {
	if strings.EqualFold(podAnnotations[annotations.NetworkSetupV2], "true") {
		return OrderBefore
	}
	switch v := podAnnotations[annotations.NetworkOrder]; v {
	case OrderBefore, OrderAfter:
		return v
	}
	if handlerDefault != "" {
		return handlerDefault
	}
	return OrderBefore
}

func portMappings(pms []*runtimeapi.PortMapping) []network.PortMapping {
	var out []network.PortMapping
	for _, pm := range pms {
		// Like containerd: a mapping without a host port publishes nothing.
		if pm.GetHostPort() <= 0 {
			continue
		}
		out = append(out, network.PortMapping{
			HostPort:      pm.GetHostPort(),
			ContainerPort: pm.GetContainerPort(),
			Protocol:      strings.ToLower(pm.GetProtocol().String()),
			HostIP:        pm.GetHostIp(),
		})
	}
	return out
}

func int64Ptr(v *runtimeapi.Int64Value) *int64 {
	if v == nil {
		return nil
	}
	n := v.GetValue()
	return &n
}
