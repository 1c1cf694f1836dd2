package podrequest

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/specgen"
)

// Resources translates CRI resources into specgen's (CreateContainer,
// UpdateContainerResources and the pod's totals share it).
func Resources(r *runtimeapi.LinuxContainerResources) specgen.Resources {
	out := specgen.Resources{
		CPUShares: uint64(r.GetCpuShares()), CPUQuota: r.GetCpuQuota(), CPUPeriod: uint64(r.GetCpuPeriod()),
		CpusetCpus: r.GetCpusetCpus(), CpusetMems: r.GetCpusetMems(),
		MemoryLimit: r.GetMemoryLimitInBytes(), MemorySwapLimit: r.GetMemorySwapLimitInBytes(),
		OOMScoreAdj: int(r.GetOomScoreAdj()), Unified: r.GetUnified(),
	}
	for _, h := range r.GetHugepageLimits() {
		if out.HugepageLimits == nil {
			out.HugepageLimits = map[string]uint64{}
		}
		out.HugepageLimits[h.GetPageSize()] = h.GetLimit()
	}
	return out
}

// ResourcesOf is Resources, nil for nil: the kubelet did not send them.
func ResourcesOf(r *runtimeapi.LinuxContainerResources) *specgen.Resources {
	if r == nil {
		return nil
	}
	out := Resources(r)
	return &out
}
