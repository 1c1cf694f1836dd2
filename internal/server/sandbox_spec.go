package server

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
)

// sandboxSpec builds the sandbox's OCI spec: the pod's request,
// described for specgen by the request itself, plus what the daemon made
// for it, with the process (or none) of the pod's kind of sandbox, ctl,
// on rootfs.
func (s *Server) sandboxSpec(ctl podsandbox.Controller, rec sandbox.Record, pod *podrequest.Pod, files sandboxFiles, plan podsandbox.Plan, rootfs string) (*specs.Spec, error) {
	desc := pod.Sandbox()
	desc.ID = rec.ID
	desc.Hostname = files.HostnameValue
	desc.NetNSPath = rec.NetworkSettings.SandboxKey
	desc.ShmPath = rec.ShmPath
	desc.HostNetwork = rec.NetworkMode == sandbox.ModeHost
	desc.CgroupsPath = s.cgroupSpecPath(rec.CgroupParent, rec.ID)
	desc.MinOOMScoreAdj = s.minOOMScore
	desc.Files = []specgen.File{
		{Source: files.ResolvConf, Dest: "/etc/resolv.conf"},
		{Source: files.Hostname, Dest: "/etc/hostname"},
		{Source: files.Hosts, Dest: "/etc/hosts"},
	}
	// A privileged pod gets what the daemon has, not every capability
	// (CAP_SYS_RESOURCE may be missing: some VMs withhold it from root).
	desc.Capabilities = s.host.Capabilities
	desc.Annotations = annotations.Allowed(s.current().Config().Runtimes[rec.RuntimeHandler].PodAnnotations, pod.Annotations)
	return ctl.Spec(desc, plan, rootfs)
}
