package specgen

import (
	"fmt"
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// resources maps a container's limits to the OCI ones, with containerd's
// rules: zero means unset; a memory limit without a swap limit also caps
// swap (so the container does not swap), where the host can limit swap;
// hugepage limits only where the hugetlb controller is usable.
// LinuxResources translates r for host, as ContainerSpec does; the
// server uses it for UpdateContainerResources too.
func LinuxResources(r Resources, host Host) (*specs.LinuxResources, error) {
	return resources(r, host)
}

func resources(r Resources, host Host) (*specs.LinuxResources, error) {
	out := &specs.LinuxResources{}
	if r.CPUShares != 0 || r.CPUQuota != 0 || r.CPUPeriod != 0 || r.CpusetCpus != "" || r.CpusetMems != "" {
		cpu := &specs.LinuxCPU{Cpus: r.CpusetCpus, Mems: r.CpusetMems}
		if r.CPUShares != 0 {
			cpu.Shares = &r.CPUShares
		}
		if r.CPUQuota != 0 {
			cpu.Quota = &r.CPUQuota
		}
		if r.CPUPeriod != 0 {
			cpu.Period = &r.CPUPeriod
		}
		out.CPU = cpu
	}
	if r.MemoryLimit != 0 || (r.MemorySwapLimit != 0 && host.SwapControl) {
		mem := &specs.LinuxMemory{}
		if r.MemoryLimit != 0 {
			mem.Limit = &r.MemoryLimit
			if host.SwapControl {
				swap := r.MemoryLimit
				mem.Swap = &swap
			}
		}
		if r.MemorySwapLimit != 0 && host.SwapControl {
			mem.Swap = &r.MemorySwapLimit
		}
		out.Memory = mem
	}
	if host.Hugetlb && len(r.HugepageLimits) > 0 {
		sizes := make([]string, 0, len(r.HugepageLimits))
		for size := range r.HugepageLimits {
			sizes = append(sizes, size)
		}
		sort.Strings(sizes)
		for _, size := range sizes {
			out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: size, Limit: r.HugepageLimits[size]})
		}
	}
	if r.PidsLimit != 0 {
		out.Pids = &specs.LinuxPids{Limit: r.PidsLimit}
	}
	if len(r.Unified) > 0 {
		if !host.CgroupV2 {
			return nil, fmt.Errorf("cgroup v2 settings on a cgroup v1 host: %w", errdefs.ErrInvalidArgument)
		}
		out.Unified = make(map[string]string, len(r.Unified))
		for k, v := range r.Unified {
			out.Unified[k] = v
		}
	}
	return out, nil
}
