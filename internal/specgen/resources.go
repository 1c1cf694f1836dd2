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
	if err := CheckResources(r); err != nil {
		return nil, err
	}
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
		limit := r.PidsLimit
		out.Pids = &specs.LinuxPids{Limit: &limit}
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

// Bounds of the CPU and memory settings, zero meaning unset for each.
const (
	// minCPUShares and maxCPUShares bound cpu.shares: the kernel clamps
	// a value outside, which runc reports as an error (cgroup v1), or the
	// cpu.weight runc converts it to is out of range (v2). The kubelet's
	// MinShares and MaxShares.
	minCPUShares = 2
	maxCPUShares = 262144
	// minCPUPeriod and maxCPUPeriod bound the CFS period in µs (the
	// kernel's 1ms and 1s); a positive quota must be at least
	// minCPUPeriod and at most maxCPUQuota, the kernel's max_cfs_runtime.
	// A negative quota is no limit.
	minCPUPeriod = 1000
	maxCPUPeriod = 1000000
	maxCPUQuota  = 1<<44 - 1
	// minMemoryLimit is Docker's smallest memory limit (6 MiB): runc
	// cannot set a limit below what the container's init already uses,
	// about 2 MiB, and a container will not run long under 6 MiB. -1 is
	// no limit; other negative values the kernel refuses.
	minMemoryLimit = 6 << 20
)

// CheckResources refuses CPU and memory settings the kernel refuses, which
// runc would report only at create, after the pod's or container's
// resources are made.
func CheckResources(r Resources) error {
	switch {
	case r.CPUShares != 0 && (r.CPUShares < minCPUShares || r.CPUShares > maxCPUShares):
		return fmt.Errorf("cpu shares %d outside [%d, %d]: %w", r.CPUShares, minCPUShares, maxCPUShares, errdefs.ErrInvalidArgument)
	case r.CPUPeriod != 0 && (r.CPUPeriod < minCPUPeriod || r.CPUPeriod > maxCPUPeriod):
		return fmt.Errorf("cpu period %dµs outside [%d, %d]: %w", r.CPUPeriod, minCPUPeriod, maxCPUPeriod, errdefs.ErrInvalidArgument)
	case r.CPUQuota > 0 && (r.CPUQuota < minCPUPeriod || r.CPUQuota > maxCPUQuota):
		return fmt.Errorf("cpu quota %dµs outside [%d, %d]: %w", r.CPUQuota, minCPUPeriod, int64(maxCPUQuota), errdefs.ErrInvalidArgument)
	case r.MemoryLimit < -1 || (r.MemoryLimit > 0 && r.MemoryLimit < minMemoryLimit):
		return fmt.Errorf("memory limit %d below %d bytes: %w", r.MemoryLimit, minMemoryLimit, errdefs.ErrInvalidArgument)
	}
	return nil
}
