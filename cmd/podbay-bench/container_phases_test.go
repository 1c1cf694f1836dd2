package main

import (
	"strings"
	"testing"
)

// TestContainerPhasesOrder: create, start, stop, remove, then other
// operations by name; phases in the daemon's order, then others by name;
// other metrics' series left out.
func TestContainerPhasesOrder(t *testing.T) {
	in := `podbay_container_phase_duration_seconds_count{operation="remove",phase="dir"} 1
podbay_container_phase_duration_seconds_count{operation="zeta",phase="b"} 1
podbay_container_phase_duration_seconds_count{operation="create",phase="zzz"} 1
podbay_container_phase_duration_seconds_count{operation="start",phase="runtime_start"} 1
podbay_container_phase_duration_seconds_count{operation="alpha",phase="a"} 1
podbay_container_phase_duration_seconds_count{operation="create",phase="rootfs"} 1
podbay_container_phase_duration_seconds_count{operation="remove",phase="runtime_delete"} 1
podbay_container_phase_duration_seconds_count{operation="create",phase="prepare"} 1
podbay_container_phase_duration_seconds_sum{operation="stop",phase="persist"} 1
podbay_sandbox_phase_duration_seconds_count{operation="stop",phase="persist"} 1
`
	set, err := parseText(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range set.containerPhases() {
		got = append(got, k.operation+"/"+k.phase)
	}
	want := "create/prepare create/rootfs create/zzz start/runtime_start remove/runtime_delete remove/dir alpha/a zeta/b"
	if strings.Join(got, " ") != want {
		t.Errorf("containerPhases = %v, want %s", got, want)
	}
}
