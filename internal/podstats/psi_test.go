package podstats

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cgroups"
)

func TestAddPSI(t *testing.T) {
	st := &cgroups.Stats{Timestamp: time.Unix(5, 0)}
	cpu, mem := &runtimeapi.CpuUsage{}, &runtimeapi.MemoryUsage{}
	var io *runtimeapi.IoUsage
	addPSI(st, cpu, mem, &io)
	if cpu.Psi != nil || mem.Psi != nil || io != nil {
		t.Errorf("no PSI (cgroup v1) filled %v %v %v", cpu.Psi, mem.Psi, io)
	}
	st.PSI = &cgroups.PSIStats{
		CPU: &cgroups.PSIResource{Some: cgroups.PSILine{Avg10: 1.5, TotalNanos: 7000}},
		IO:  &cgroups.PSIResource{Full: cgroups.PSILine{Avg300: 2.5, TotalNanos: 9000}},
	}
	addPSI(st, cpu, mem, &io)
	if cpu.GetPsi().GetSome().GetAvg10() != 1.5 || cpu.GetPsi().GetSome().GetTotal() != 7000 || cpu.GetPsi().GetFull() == nil {
		t.Errorf("cpu psi %v", cpu.Psi)
	}
	if mem.Psi != nil {
		t.Errorf("memory psi %v, want none (no memory.pressure)", mem.Psi)
	}
	if io.GetTimestamp() != 5e9 || io.GetPsi().GetFull().GetAvg300() != 2.5 || io.GetPsi().GetFull().GetTotal() != 9000 {
		t.Errorf("io %v", io)
	}
}
