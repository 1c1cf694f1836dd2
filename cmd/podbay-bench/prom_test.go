package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP podbay_sandbox_phase_duration_seconds Latency of each phase.
# TYPE podbay_sandbox_phase_duration_seconds summary
podbay_sandbox_phase_duration_seconds{operation="run",phase="cni",quantile="0.5"} 0.012
podbay_sandbox_phase_duration_seconds{operation="run",phase="cni",quantile="0.95"} 0.02
podbay_sandbox_phase_duration_seconds_sum{operation="run",phase="cni"} 0.3
podbay_sandbox_phase_duration_seconds_count{operation="run",phase="cni"} 20
podbay_sandbox_phase_duration_seconds{operation="stop",phase="persist",quantile="0.5"} NaN
podbay_sandbox_phase_duration_seconds_sum{operation="stop",phase="persist"} 0
podbay_sandbox_phase_duration_seconds_count{operation="stop",phase="persist"} 0
podbay_sandbox_phase_duration_seconds_count{operation="run",phase="prepare"} 20
podbay_sandbox_phase_duration_seconds_count{operation="remove",phase="netns"} 20
podbay_sandbox_phase_duration_seconds_count{operation="run",phase="extra"} 1
podbay_rpc_duration_seconds_bucket{method="RunPodSandbox",le="+Inf"} 20
podbay_rpc_duration_seconds_sum{method="RunPodSandbox"} 2.5
odd_labels{a="x\"y\\z",b = "" } 1 1700000000000

go_goroutines 12
`

func TestParseText(t *testing.T) {
	set, err := parseText(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"podbay_sandbox_phase_duration_seconds", []string{"operation", "run", "phase", "cni", "quantile", "0.95"}, 0.02},
		{"podbay_sandbox_phase_duration_seconds_count", []string{"operation", "run", "phase", "cni"}, 20},
		{"podbay_rpc_duration_seconds_bucket", []string{"method", "RunPodSandbox", "le", "+Inf"}, 20},
		{"odd_labels", []string{"a", `x"y\z`, "b", ""}, 1},
		{"go_goroutines", nil, 12},
	} {
		got, ok := set.get(tc.name, tc.labels...)
		if !ok || got != tc.want {
			t.Errorf("get(%s %v) = %v, %v; want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if v, ok := set.get("podbay_sandbox_phase_duration_seconds", "operation", "stop", "phase", "persist", "quantile", "0.5"); !ok || !math.IsNaN(v) {
		t.Errorf("NaN quantile = %v, %v", v, ok)
	}
	if _, ok := set.get("podbay_sandbox_phase_duration_seconds_count", "operation", "run"); ok {
		t.Error("get matched a series with more labels than asked for")
	}

	var got []string
	for _, k := range set.phases("podbay_sandbox_phase_duration_seconds") {
		got = append(got, k.operation+"/"+k.phase)
	}
	want := "run/prepare run/cni run/extra stop/persist remove/netns"
	if strings.Join(got, " ") != want {
		t.Errorf("phases = %v, want %s", got, want)
	}
}

func TestParseTextErrors(t *testing.T) {
	for _, in := range []string{
		"novalue\n",
		`m{a="x} 1` + "\n",
		`m{a=x} 1` + "\n",
		"m notanumber\n",
		"m 1 2 3\n",
	} {
		if _, err := parseText(strings.NewReader(in)); err == nil {
			t.Errorf("parseText(%q) succeeded", in)
		}
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 20; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 10 * time.Millisecond},
		{0.95, 19 * time.Millisecond},
		{1, 20 * time.Millisecond},
	} {
		if got := quantile(d, tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != -1 {
		t.Errorf("quantile of no samples = %v, want -1", got)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-n", "5", "--concurrency", "1, 10,4"})
	if err != nil {
		t.Fatal(err)
	}
	if o.pods != 5 || len(o.concurrency) != 3 || o.concurrency[1] != 10 {
		t.Errorf("parseFlags = %+v", o)
	}
	if o.mode != modePods || o.stopTimeout != 10*time.Second {
		t.Errorf("defaults: mode %q, stop timeout %s", o.mode, o.stopTimeout)
	}
	o, err = parseFlags([]string{"-mode", "containers", "-image", "127.0.0.1:5000/test/busybox:latest", "-log-dir", "/tmp/logs", "-stop-timeout", "3s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeContainers || o.stopTimeout != 3*time.Second {
		t.Errorf("parseFlags = %+v", o)
	}
	for _, args := range [][]string{
		{"-n", "0"}, {"-concurrency", "0"}, {"-concurrency", "a"}, {"-concurrency", ""}, {"extra"},
		{"-mode", "vms"}, {"-mode", "containers"}, {"-mode", "containers", "-image", "i"}, {"-log-dir", "rel"},
		{"-stop-timeout", "1500ms"}, {"-stop-timeout", "-1s"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%v) succeeded", args)
		}
	}
}
