package main

import (
	"io"
)

const containerPhaseMetric = "podbay_container_phase_duration_seconds"

// containerPhaseOrder is the order the daemon runs each container
// operation's phases in.
var containerPhaseOrder = map[string][]string{
	"create": {"prepare", "rootfs", "spec", "runtime_create", "persist"},
	"start":  {"runtime_start", "persist"},
	"stop":   {"runtime_stop", "persist"},
	"remove": {"runtime_delete", "dir", "rootfs", "persist"},
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
	r.printPhaseTable(w, "daemon container phases", containerPhaseMetric, keys, 17, true)
}
