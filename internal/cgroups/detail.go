package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MemoryDetail is memory accounting beyond MemoryStats, in bytes unless
// said otherwise. A field the kernel does not report on this cgroup
// version reads 0 (see each field).
type MemoryDetail struct {
	// MaxUsage is the peak of Usage: v1 memory.max_usage_in_bytes, v2
	// memory.peak (Linux 5.19+).
	MaxUsage uint64
	// Failcnt counts the times usage hit the limit: v1 memory.failcnt,
	// v2 the "max" entry of memory.events.
	Failcnt uint64
	// MappedFile is page cache mapped into tasks (v1 total_mapped_file,
	// v2 file_mapped).
	MappedFile uint64
	// ActiveFile and InactiveFile split the page cache (v1 total_ and v2
	// plain active_file / inactive_file).
	ActiveFile   uint64
	InactiveFile uint64
	// KernelUsage is kernel memory charged to the cgroup: v1
	// memory.kmem.usage_in_bytes, v2 "kernel" of memory.stat (5.18+).
	KernelUsage uint64
}

// Pressure is a cgroup's pressure stall information, one entry per
// resource; an entry is nil when its file is absent.
type Pressure struct {
	CPU    *PressureTotals
	Memory *PressureTotals
	IO     *PressureTotals
}

// PressureTotals are the cumulative stall times of one resource, in
// microseconds: Some while at least one task stalled, Full while all
// non-idle tasks did (the kernel's "total=" fields).
type PressureTotals struct {
	SomeMicros uint64
	FullMicros uint64
}

// memoryDetailV1 fills d from a v1 memory cgroup whose memory.stat was
// parsed into m.
func memoryDetailV1(dir string, m map[string]uint64, d *MemoryDetail) error {
	d.MappedFile = firstKey(m, "total_mapped_file", "mapped_file")
	d.ActiveFile = firstKey(m, "total_active_file", "active_file")
	d.InactiveFile = firstKey(m, "total_inactive_file", "inactive_file")
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"memory.max_usage_in_bytes", &d.MaxUsage},
		{"memory.failcnt", &d.Failcnt},
		{"memory.kmem.usage_in_bytes", &d.KernelUsage},
	} {
		b, err := readOptional(dir, f.name)
		if err != nil {
			return err
		}
		if b == nil {
			continue
		}
		if *f.dst, err = parseSingle(f.name, b); err != nil {
			return err
		}
	}
	return nil
}

// memoryDetailV2 fills d from a v2 cgroup whose memory.stat was parsed
// into m.
func memoryDetailV2(dir string, m map[string]uint64, d *MemoryDetail) error {
	d.MappedFile = m["file_mapped"]
	d.ActiveFile = m["active_file"]
	d.InactiveFile = m["inactive_file"]
	d.KernelUsage = m["kernel"]
	b, err := readOptional(dir, "memory.peak")
	if err != nil {
		return err
	}
	if b != nil {
		if d.MaxUsage, err = parseSingle("memory.peak", b); err != nil {
			return err
		}
	}
	if b, err = readOptional(dir, "memory.events"); err != nil || b == nil {
		return err
	}
	d.Failcnt = parseKeyed(b)["max"]
	return nil
}

// readPressure reads cpu.pressure, memory.pressure and io.pressure of a
// cgroup2 directory. It returns nil when none is there (no PSI in the
// kernel, or psi=0 on its command line, where reads fail with
// EOPNOTSUPP).
func readPressure(dir string) (*Pressure, error) {
	var p Pressure
	found := false
	for _, f := range []struct {
		name string
		dst  **PressureTotals
	}{
		{"cpu.pressure", &p.CPU},
		{"memory.pressure", &p.Memory},
		{"io.pressure", &p.IO},
	} {
		b, err := readOptional(dir, f.name)
		if errors.Is(err, unix.EOPNOTSUPP) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		t, err := parsePressure(f.name, b)
		if err != nil {
			return nil, err
		}
		*f.dst = t
		found = true
	}
	if !found {
		return nil, nil
	}
	return &p, nil
}

// parsePressure parses a pressure file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=8244
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=8244
//
// The "full" line is absent on kernels before 5.13 for cpu.pressure.
func parsePressure(name string, b []byte) (*PressureTotals, error) {
	var t PressureTotals
	seen := false
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var dst *uint64
		switch string(fields[0]) {
		case "some":
			dst = &t.SomeMicros
		case "full":
			dst = &t.FullMicros
		default:
			continue
		}
		for _, f := range fields[1:] {
			k, v, ok := bytes.Cut(f, []byte("="))
			if !ok || string(k) != "total" {
				continue
			}
			n, ok := parseCounter(string(v))
			if !ok {
				return nil, fmt.Errorf("parse %s: total %q is not a number", name, v)
			}
			*dst = n
			seen = true
		}
	}
	if !seen {
		return nil, fmt.Errorf("parse %s: no total", name)
	}
	return &t, nil
}

// pressureDirV1 is where a v1 host keeps the cgroup's pressure files: the
// same path in the hybrid cgroup2 mount, where runc places every container
// it starts. Where the runtime made no such cgroup, there is no pressure.
func (r *Reader) pressureDirV1(rel string) (string, bool) {
	if r.unified == "" {
		return "", false
	}
	dir := filepath.Join(r.unified, rel)
	return dir, exists(dir)
}
