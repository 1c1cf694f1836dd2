package cgroups

import "path/filepath"

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
