package cgroups

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PSIStats is a cgroup's pressure stall information (cgroup v2's
// cpu.pressure, memory.pressure and io.pressure); a resource is nil where
// the kernel does not report it. ContainerStats and PodSandboxStats carry
// it in CRI form, ListPodSandboxMetrics as cAdvisor's
// container_pressure_* counters: one reading feeds both.
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

// readPSI reads cpu.pressure, memory.pressure and io.pressure of a
// cgroup2 directory. It returns nil when none is there (a kernel without
// CONFIG_PSI, or booted with psi=0, which makes the reads fail with
// EOPNOTSUPP).
func readPSI(dir string) (*PSIStats, error) {
	var p PSIStats
	found := false
	for _, f := range []struct {
		name string
		dst  **PSIResource
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
		r, err := ParsePSI(string(b))
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", f.name, err)
		}
		*f.dst = r
		found = true
	}
	if !found {
		return nil, nil
	}
	return &p, nil
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
