package main

import (
	"fmt"
	"io"
)

const containerPhaseMetric = "podbay_container_phase_duration_seconds"

// containerPhaseOrder is the order the daemon runs each container
// operation's phases in.
var containerPhaseOrder = map[string][]string{
	"create": {"prepare", "rootfs", "spec", "runtime_create", "persist"},
	"start":  {"runtime_start", "persist"},
	"stop":   {"runtime_stop", "persist"},
	"remove": {"runtime_delete", "rootfs", "dir", "persist"},
}

// containerPhases lists the (operation, phase) series of the container
// phase summary in the scrape: create, start, stop, remove, then any other
// operation; phases in the order the daemon runs them, then by name.
func (set metricSet) containerPhases() []phaseKey {
	return set.phaseKeys(containerPhaseMetric, []string{"create", "start", "stop", "remove"}, containerPhaseOrder)
}

// printContainerPhases prints the daemon's container phases of the mode,
// as print does the sandbox ones; nothing when the daemon exports none.
func (r report) printContainerPhases(w io.Writer) {
	keys := r.after.containerPhases()
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(w, "\ndaemon container phases, ms (p50/p95: summary since the daemon started; count, mean: this mode)\n")
	fmt.Fprintf(w, "%-17s %-15s %6s %9s %9s %9s\n", "operation", "phase", "count", "p50", "p95", "mean")
	for _, k := range keys {
		labels := []string{"operation", k.operation, "phase", k.phase}
		p50, _ := r.after.get(containerPhaseMetric, append(labels, "quantile", "0.5")...)
		p95, _ := r.after.get(containerPhaseMetric, append(labels, "quantile", "0.95")...)
		mean, count := r.meanDelta(containerPhaseMetric, labels...)
		if count == 0 {
			continue
		}
		fmt.Fprintf(w, "%-17s %-15s %6.0f %9s %9s %9s\n", k.operation, k.phase, count, msFloat(p50), msFloat(p95), msFloat(mean))
	}
}
