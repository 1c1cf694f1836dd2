package podstats

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
)

// criPSI is a resource's PSI in CRI form; nil without it.
func criPSI(r *cgroups.PSIResource) *runtimeapi.PsiStats {
	if r == nil {
		return nil
	}
	line := func(l cgroups.PSILine) *runtimeapi.PsiData {
		return &runtimeapi.PsiData{Total: l.TotalNanos, Avg10: l.Avg10, Avg60: l.Avg60, Avg300: l.Avg300}
	}
	return &runtimeapi.PsiStats{Some: line(r.Some), Full: line(r.Full)}
}

// addPSI fills the CPU, memory and IO pressure of a sample into its CRI
// stats where the kernel reports them (cgroup v2); io is set only then.
func addPSI(st *cgroups.Stats, cpu *runtimeapi.CpuUsage, mem *runtimeapi.MemoryUsage, io **runtimeapi.IoUsage) {
	if st == nil || st.PSI == nil {
		return
	}
	cpu.Psi = criPSI(st.PSI.CPU)
	mem.Psi = criPSI(st.PSI.Memory)
	if st.PSI.IO != nil {
		*io = &runtimeapi.IoUsage{Timestamp: st.Timestamp.UnixNano(), Psi: criPSI(st.PSI.IO)}
	}
}
