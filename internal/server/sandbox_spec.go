package server

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
)

// sandboxSpec translates the CRI sandbox config into specgen's plain
// description and builds the pause container's OCI spec.
func (s *Server) sandboxSpec(rec sandbox.Record, cfg *runtimeapi.PodSandboxConfig, files sandboxFiles, rootfs string, args []string) (*specs.Spec, error) {
	linux := cfg.GetLinux()
	sc := linux.GetSecurityContext()
	nsOpts := sc.GetNamespaceOptions()
	desc := specgen.Sandbox{
		ID:             rec.ID,
		Name:           rec.Metadata.Name,
		Namespace:      rec.Metadata.Namespace,
		UID:            rec.Metadata.UID,
		LogDir:         cfg.GetLogDirectory(),
		RootfsPath:     rootfs,
		Args:           args,
		Hostname:       files.HostnameValue,
		NetNSPath:      rec.NetworkSettings.SandboxKey,
		HostNetwork:    rec.NetworkMode == sandbox.ModeHost,
		HostPID:        nsOpts.GetPid() == runtimeapi.NamespaceMode_NODE,
		HostIPC:        nsOpts.GetIpc() == runtimeapi.NamespaceMode_NODE,
		CgroupsPath:    s.cgroupSpecPath(rec.CgroupParent, rec.ID),
		Sysctls:        linux.GetSysctls(),
		MinOOMScoreAdj: s.minOOMScore,
		Files: []specgen.File{
			{Source: files.ResolvConf, Dest: "/etc/resolv.conf"},
			{Source: files.Hostname, Dest: "/etc/hostname"},
			{Source: files.Hosts, Dest: "/etc/hosts"},
		},
		SupplementalGroups: sc.GetSupplementalGroups(),
		Privileged:         sc.GetPrivileged(),
		// A privileged pod gets what the daemon has, not every capability
		// (CAP_SYS_RESOURCE may be missing: some VMs withhold it from root).
		Capabilities: s.host.Capabilities,
		Annotations:  annotations.Allowed(s.current().Config().Runtimes[rec.RuntimeHandler].PodAnnotations, cfg.GetAnnotations()),
	}
	if sc.GetRunAsUser() != nil {
		v := sc.GetRunAsUser().GetValue()
		desc.RunAsUser = &v
	}
	if sc.GetRunAsGroup() != nil {
		v := sc.GetRunAsGroup().GetValue()
		desc.RunAsGroup = &v
	}
	setPodResources(&desc, linux.GetResources())
	var err error
	if desc.UserNS, err = podUserNamespace(nsOpts.GetUsernsOptions()); err != nil {
		return nil, err
	}
	return specgen.SandboxSpec(desc)
}

// setPodResources copies the pod's resource totals, when the kubelet sent
// them, into desc.
func setPodResources(desc *specgen.Sandbox, r *runtimeapi.LinuxContainerResources) {
	if r == nil {
		return
	}
	desc.HasResources = true
	desc.CPUShares = uint64(r.GetCpuShares())
	desc.CPUQuota = r.GetCpuQuota()
	desc.CPUPeriod = uint64(r.GetCpuPeriod())
	desc.MemoryLimit = r.GetMemoryLimitInBytes()
}
