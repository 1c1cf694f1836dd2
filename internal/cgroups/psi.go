package cgroups

import (
	"fmt"
	"strconv"
	"strings"
)

// PSIStats is a cgroup's pressure stall information (cgroup v2's
// cpu.pressure, memory.pressure and io.pressure); a resource is nil where
// the kernel does not report it.
type PSIStats struct {
	CPU, Memory, IO *PSIResource
}

// PSIResource is one resource's pressure: for some of the cgroup's tasks
// and for all of them (full).
type PSIResource struct {
	Some, Full PSILine
}

// PSILine is one line of a pressure file: the share of time (in %) tasks
// were stalled over 10, 60 and 300 seconds, and the total stall time.
type PSILine struct {
	Avg10, Avg60, Avg300 float64
	// TotalNanos is the cumulative stall time in nanoseconds (the file
	// counts microseconds).
	TotalNanos uint64
}

// readPSIV2 reads the pressure files of a v2 cgroup dir; nil when none
// can be read (a kernel without CONFIG_PSI, or booted with psi=0, which
// makes the files fail with EOPNOTSUPP).
func readPSIV2(dir string) *PSIStats {
	read := func(name string) *PSIResource {
		b, err := readOptional(dir, name)
		if err != nil || b == nil {
			return nil
		}
		r, err := ParsePSI(string(b))
		if err != nil {
			return nil
		}
		return r
	}
	p := &PSIStats{CPU: read("cpu.pressure"), Memory: read("memory.pressure"), IO: read("io.pressure")}
	if p.CPU == nil && p.Memory == nil && p.IO == nil {
		return nil
	}
	return p
}

// ParsePSI parses a pressure file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// The "full" line is absent from cpu.pressure before Linux 5.13; it is
// then all zero.
func ParsePSI(data string) (*PSIResource, error) {
	var r PSIResource
	seenSome := false
	for _, line := range strings.Split(strings.TrimSpace(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var dst *PSILine
		switch fields[0] {
		case "some":
			dst, seenSome = &r.Some, true
		case "full":
			dst = &r.Full
		default:
			return nil, fmt.Errorf("pressure line %q: want some or full", line)
		}
		seen := 0
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("pressure line %q: field %q", line, kv)
			}
			var err error
			switch k {
			case "avg10":
				dst.Avg10, err = strconv.ParseFloat(v, 64)
			case "avg60":
				dst.Avg60, err = strconv.ParseFloat(v, 64)
			case "avg300":
				dst.Avg300, err = strconv.ParseFloat(v, 64)
			case "total":
				var us uint64
				us, err = strconv.ParseUint(v, 10, 64)
				dst.TotalNanos = us * 1000
			default:
				continue // a field a newer kernel adds
			}
			if err != nil {
				return nil, fmt.Errorf("pressure line %q: %s: %w", line, k, err)
			}
			seen++
		}
		if seen != 4 {
			return nil, fmt.Errorf("pressure line %q: want avg10, avg60, avg300 and total", line)
		}
	}
	if !seenSome {
		return nil, fmt.Errorf("pressure data %q: no some line", data)
	}
	return &r, nil
}
