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

// TestPrintContainerPhases: the container table's wide operation column,
// count and mean over the mode, and no row for a series the mode did not
// add to.
func TestPrintContainerPhases(t *testing.T) {
	parse := func(in string) metricSet {
		set, err := parseText(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	before := parse(`podbay_container_phase_duration_seconds_count{operation="create",phase="rootfs"} 2
podbay_container_phase_duration_seconds_sum{operation="create",phase="rootfs"} 0.1
podbay_container_phase_duration_seconds_count{operation="remove_background",phase="dir"} 3
podbay_container_phase_duration_seconds_sum{operation="remove_background",phase="dir"} 0.3
`)
	after := parse(`podbay_container_phase_duration_seconds_count{operation="create",phase="rootfs"} 6
podbay_container_phase_duration_seconds_sum{operation="create",phase="rootfs"} 0.5
podbay_container_phase_duration_seconds{operation="create",phase="rootfs",quantile="0.5"} 0.09
podbay_container_phase_duration_seconds{operation="create",phase="rootfs",quantile="0.95"} 0.2
podbay_container_phase_duration_seconds_count{operation="remove_background",phase="dir"} 3
podbay_container_phase_duration_seconds_sum{operation="remove_background",phase="dir"} 0.3
`)
	var b strings.Builder
	report{before: before, after: after, scraped: true}.printContainerPhases(&b)
	want := `
daemon container phases, ms (p50/p95: summary since the daemon started; count, mean: this mode)
operation         phase            count       p50       p95      mean
create            rootfs               4     90.00    200.00    100.00
`
	if b.String() != want {
		t.Errorf("printContainerPhases:\n%s\nwant:\n%s", b.String(), want)
	}
}
