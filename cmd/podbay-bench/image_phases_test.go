package main

import (
	"strings"
	"testing"
)

// compare prints the image pull's phases, in the order a pull runs them,
// and the layers' unpacking.
func TestPrintPhasesImage(t *testing.T) {
	var in strings.Builder
	for _, k := range []phaseKey{{"pull", "record"}, {"pull", "commit"}, {"layer", "unpack"}, {"pull", "layers"},
		{"pull", "manifest"}, {"pull", "resolve"}} {
		in.WriteString(`podbay_image_phase_duration_seconds_count{operation="` + k.operation + `",phase="` + k.phase + `"} 2` + "\n")
		in.WriteString(`podbay_image_phase_duration_seconds_sum{operation="` + k.operation + `",phase="` + k.phase + `"} 0.004` + "\n")
	}
	after, err := parseText(strings.NewReader(in.String()))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printPhases(&b, metricSet{}, after)
	out := b.String()
	if !strings.Contains(out, "podbay podbay_image_phase_duration_seconds over the rounds") {
		t.Fatalf("no image phases in:\n%s", out)
	}
	last := -1
	for _, want := range []string{"layer      unpack", "pull       resolve", "pull       manifest", "pull       layers",
		"pull       commit", "pull       record"} {
		i := strings.Index(out, want)
		if i < 0 || i < last {
			t.Fatalf("%q missing or out of order in:\n%s", want, out)
		}
		last = i
	}
}
