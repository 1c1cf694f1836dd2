package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// parseCounter parses one counter as the kernel prints it. Counters are
// unsigned, but a few memory.stat entries are summed from per-CPU values
// and have been seen transiently negative: those read as 0. A value too
// large for uint64 saturates. ok is false for anything that is not a
// number.
func parseCounter(s string) (v uint64, ok bool) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err == nil {
		return v, true
	}
	if errors.Is(err, strconv.ErrRange) {
		return math.MaxUint64, true
	}
	if len(s) > 1 && s[0] == '-' {
		if _, err := strconv.ParseUint(s[1:], 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return 0, true
		}
	}
	return 0, false
}

// parseSingle parses a file that holds one counter, such as
// memory.current or cpuacct.usage.
func parseSingle(name string, b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	v, ok := parseCounter(s)
	if !ok {
		return 0, fmt.Errorf("parse %s: %q is not a number", name, s)
	}
	return v, nil
}

// v1Unlimited is where v1 limits start to mean "no limit": the kernel
// prints an unset memory limit as LONG_MAX rounded down to a page
// (9223372036854771712 with 4 KiB pages), and pages reach 64 KiB and more
// on some architectures, so anything in the last MiB below LONG_MAX counts.
const v1Unlimited = math.MaxInt64 - (1<<20 - 1)

// parseLimit parses a limit file (memory.max, pids.max,
// memory.limit_in_bytes). "max" and v1's near-LONG_MAX sentinel are no limit
// and read as 0.
func parseLimit(name string, b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, nil
	}
	v, err := parseSingle(name, b)
	if err != nil {
		return 0, err
	}
	if v >= v1Unlimited {
		return 0, nil
	}
	return v, nil
}

// parseKeyed parses a flat-keyed file ("key value" lines: memory.stat,
// cpu.stat, memory.events, memory.oom_control, cpuacct.stat). Lines that
// are not a key and a number are skipped, so that a field a newer kernel
// prints differently does not cost the whole sample.
func parseKeyed(b []byte) map[string]uint64 {
	m := make(map[string]uint64)
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) != 2 {
			continue
		}
		if v, ok := parseCounter(string(fields[1])); ok {
			m[string(fields[0])] = v
		}
	}
	return m
}

// firstKey returns the value of the first of keys present in m.
func firstKey(m map[string]uint64, keys ...string) uint64 {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return 0
}

// mulSat multiplies, saturating at the largest uint64.
func mulSat(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// subFloor subtracts, floored at 0.
func subFloor(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
