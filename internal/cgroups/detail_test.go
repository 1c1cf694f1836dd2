package cgroups

import "testing"

const (
	cpuPressure = "some avg10=1.50 avg60=0.40 avg300=0.10 total=6477424\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1200\n"
	memPressure = "some avg10=0.00 avg60=0.00 avg300=0.00 total=300\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=200\n"
	ioPressure  = "some avg10=0.00 avg60=0.00 avg300=0.00 total=8244\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=8000\n"
)

// wantPressure is the three files above: averages in %, totals in
// nanoseconds (the files count microseconds).
var wantPressure = PSIStats{
	CPU: &PSIResource{Some: PSILine{Avg10: 1.5, Avg60: 0.4, Avg300: 0.1, TotalNanos: 6477424000},
		Full: PSILine{TotalNanos: 1200000}},
	Memory: &PSIResource{Some: PSILine{TotalNanos: 300000}, Full: PSILine{TotalNanos: 200000}},
	IO:     &PSIResource{Some: PSILine{TotalNanos: 8244000}, Full: PSILine{TotalNanos: 8000000}},
}

func checkPressure(t *testing.T, got *PSIStats, want PSIStats) {
	t.Helper()
	if got == nil {
		t.Fatal("PSI = nil")
	}
	for _, c := range []struct {
		name      string
		got, want *PSIResource
	}{{"cpu", got.CPU, want.CPU}, {"memory", got.Memory, want.Memory}, {"io", got.IO, want.IO}} {
		switch {
		case c.got == nil && c.want == nil:
		case c.got == nil || c.want == nil || *c.got != *c.want:
			t.Errorf("%s pressure = %+v, want %+v", c.name, c.got, c.want)
		}
	}
}

func TestMemoryDetailAndPressureV2(t *testing.T) {
	root := v2Tree(t)
	writeTree(t, root, map[string]string{
		v2Container + "/memory.peak":     "7340032\n",
		v2Container + "/cpu.pressure":    cpuPressure,
		v2Container + "/memory.pressure": memPressure,
		v2Container + "/io.pressure":     ioPressure,
	})
	s := mustStats(t, mustNew(t, root), containerPath)
	want := MemoryDetail{
		MaxUsage:     7340032,
		Failcnt:      4, // memory.events "max"
		MappedFile:   1757184,
		ActiveFile:   1191936,
		InactiveFile: 1449984,
		KernelUsage:  593920,
	}
	if s.MemoryDetail != want {
		t.Errorf("MemoryDetail = %+v\nwant           %+v", s.MemoryDetail, want)
	}
	checkPressure(t, s.PSI, wantPressure)
}

func TestPressureV2Absent(t *testing.T) {
	// A kernel without PSI (or a fixture from before 4.20): no pressure
	// files, no memory.peak, no memory.events.
	root := v2Tree(t)
	remove(t, root, v2Container+"/memory.events")
	s := mustStats(t, mustNew(t, root), containerPath)
	if s.PSI != nil {
		t.Errorf("PSI = %+v, want nil", s.PSI)
	}
	if s.MemoryDetail.MaxUsage != 0 || s.MemoryDetail.Failcnt != 0 {
		t.Errorf("MemoryDetail = %+v, want no peak and no failcnt", s.MemoryDetail)
	}
}

func TestPressureV2CPUOnlySome(t *testing.T) {
	// Linux before 5.13 prints no "full" line in cpu.pressure.
	root := v2Tree(t)
	writeTree(t, root, map[string]string{v2Container + "/cpu.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=77\n"})
	s := mustStats(t, mustNew(t, root), containerPath)
	checkPressure(t, s.PSI, PSIStats{CPU: &PSIResource{Some: PSILine{TotalNanos: 77000}}})
}

func TestMemoryDetailV1AndHybridPressure(t *testing.T) {
	root := v1Tree(t)
	writeTree(t, root, map[string]string{
		"memory" + containerPath + "/memory.max_usage_in_bytes": "9437184\n",
		"memory" + containerPath + "/memory.failcnt":            "17\n",
		"unified" + containerPath + "/cpu.pressure":             cpuPressure,
		"unified" + containerPath + "/memory.pressure":          memPressure,
		"unified" + containerPath + "/io.pressure":              ioPressure,
	})
	s := mustStats(t, mustNew(t, root), containerPath)
	want := MemoryDetail{
		MaxUsage:     9437184,
		Failcnt:      17,
		MappedFile:   2162688,
		ActiveFile:   1351680,
		InactiveFile: 2297856,
		KernelUsage:  450560,
	}
	if s.MemoryDetail != want {
		t.Errorf("MemoryDetail = %+v\nwant           %+v", s.MemoryDetail, want)
	}
	checkPressure(t, s.PSI, wantPressure)
}

func TestPressureV1WithoutUnified(t *testing.T) {
	// A pure v1 host (no cgroup2 mount) has no pressure files per cgroup;
	// a hybrid host whose runtime did not create the cgroup in the
	// cgroup2 mount neither.
	root := v1Tree(t)
	removeAll(t, root, "unified"+containerPath)
	if s := mustStats(t, mustNew(t, root), containerPath); s.PSI != nil {
		t.Errorf("PSI = %+v, want nil without the unified cgroup", s.PSI)
	}
	removeAll(t, root, "unified")
	if s := mustStats(t, mustNew(t, root), containerPath); s.PSI != nil {
		t.Errorf("PSI = %+v, want nil without a cgroup2 mount", s.PSI)
	}
}

func TestPressureV2Unreadable(t *testing.T) {
	// A pressure file that is there but not PSI fails the sample, as
	// every other malformed file does.
	root := v2Tree(t)
	writeTree(t, root, map[string]string{v2Container + "/io.pressure": "some total=x\n"})
	r := mustNew(t, root)
	if s, err := r.Stats(containerPath); err == nil {
		t.Errorf("Stats with a bad io.pressure = %+v, want an error", s)
	}
}
