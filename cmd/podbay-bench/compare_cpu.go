package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// childCPU is the user and system time of the bench's children that have
// been waited for (the floors' runc and CNI plugin processes, with the
// processes they waited for: iptables under the plugins, runc init's
// parent side under runc).
func childCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// p50ms is the median of d in ms; NaN when d is empty.
func p50ms(d []time.Duration) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return msOf(quantile(s, 0.5))
}

// throughputBound says what the throughput target leaves a lifecycle in
// CPU time on this machine, against what the floors alone cost: at
// N-way every CPU is busy, so lifecycles/s can be at most cpus / (CPU
// time per lifecycle). floorCPU and cniCPU are the floors' CPU time per
// lifecycle (ms): runc's create, start and delete; the conflist's ADD and
// DEL. "" when either was not measured or no anchor's throughput is known.
func throughputBound(t table, cpus int, floorCPU, cniCPU float64) string {
	if math.IsNaN(floorCPU) || math.IsNaN(cniCPU) || cpus < 1 {
		return ""
	}
	for _, r := range t.rows {
		if r.goal.kind != goalMinRatio {
			continue
		}
		v, col := t.best(r)
		if col < 0 || v <= 0 {
			continue
		}
		target := r.goal.limit * v
		budget := float64(cpus) * 1000 / target
		floors := floorCPU + cniCPU
		verdict := "within it"
		if floors > budget {
			verdict = "over it: out of reach on this machine whatever the daemon does"
		}
		return fmt.Sprintf("CPU floor: %s's target is %.1f/s (%g × %s's %.1f), which on %d CPUs leaves a lifecycle %.1f ms of CPU time; "+
			"the floors alone take %.1f ms (the conflist's ADD + DEL %.1f, runc's create + start + delete %.1f, p50 per lifecycle; the container's own start not counted), %s",
			r.name, target, r.goal.limit, t.cols[col], v, cpus, budget, floors, cniCPU, floorCPU, verdict)
	}
	return ""
}
