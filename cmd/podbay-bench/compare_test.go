package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestCompareVerdict(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name     string
		ctr, pb  float64
		p99      float64
		g        goal
		want     string
		wantText string
	}{
		{"ratio met", 100, 40, nan, goal{goalMaxRatio, 0.5}, "met", "≤ 0.5"},
		{"ratio at the limit", 100, 50, nan, goal{goalMaxRatio, 0.5}, "met", "≤ 0.5"},
		{"ratio not met", 100, 51, nan, goal{goalMaxRatio, 0.5}, "NOT MET", "≤ 0.5"},
		{"throughput met", 2, 4.2, nan, goal{goalMinRatio, 2}, "met", "≥ 2.0"},
		{"throughput not met", 2, 3, nan, goal{goalMinRatio, 2}, "NOT MET", "≥ 2.0"},
		{"p99 met", 9, 1, 4.9, goal{goalP99, 5}, "met (p99 4.90 ms)", "p99 < 5 ms"},
		{"p99 not met", 1, 1, 5, goal{goalP99, 5}, "NOT MET (p99 5.00 ms)", "p99 < 5 ms"},
		{"no containerd value", nan, 1, nan, goal{goalMaxRatio, 1}, "-", "≤ 1.0"},
		{"no goal", 1, 2, nan, goal{}, "", "—"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tableRow{p50: [sides]float64{tc.ctr, tc.pb}, p95: nan2(), p99: tc.p99, goal: tc.g}
			if got := r.verdict(); got != tc.want {
				t.Errorf("verdict = %q, want %q", got, tc.want)
			}
			if got := tc.g.String(); got != tc.wantText {
				t.Errorf("goal = %q, want %q", got, tc.wantText)
			}
		})
	}
}

func TestCompareTable(t *testing.T) {
	o := compareOptions{concurrency: 10, rounds: 2, scalePods: 3, title: "a run", notes: []string{"a note."}}
	mk := func(run, list time.Duration, rss int64) *target {
		return &target{
			samples: map[string][]time.Duration{rpcRun: {run, run, 3 * run}},
			rates:   []float64{1, 2},
			scale:   map[string][]time.Duration{rpcListPods: {list}},
			mem:     map[string]memSample{memScale: {ok: true, rss: rss}},
		}
	}
	ts := [sides]*target{mk(100*time.Millisecond, 9*time.Millisecond, 100<<20), mk(40*time.Millisecond, 2*time.Millisecond, 50<<20)}
	tbl := buildTable(o, ts)
	var text, md strings.Builder
	tbl.printText(&text)
	tbl.printMarkdown(&md, o)
	for _, want := range []string{
		"RunPodSandbox", "100", "300", "40.0", "0.40", "≤ 0.5",
		"ListPodSandbox, 3 pods", "met (p99 2.00 ms)",
		"daemon RSS, 3 pods (MiB)", "100.0", "50.0",
		"throughput 10-way (lifecycles/s)",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
	}
	// Run, throughput (1.0 < 2), scale ListPodSandbox, 1 RSS row with data
	// out of 4 with values; rows without data have "-".
	if !strings.Contains(text.String(), "targets met: 3 of ") {
		t.Errorf("score line:\n%s", text.String())
	}
	if !strings.HasPrefix(md.String(), "a run\n\n| operation") || !strings.Contains(md.String(), "| RunPodSandbox | 100 | 300 | 40.0 | 120 | 0.40 | ≤ 0.5 | met |") ||
		!strings.Contains(md.String(), "**NOT MET**") || !strings.HasSuffix(md.String(), " a note.\n") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

func TestParseCompareFlags(t *testing.T) {
	base := []string{"-containerd-socket", "/c.sock", "-containerd-log-dir", "/c", "-podbay-socket", "/p.sock", "-podbay-log-dir", "/p", "-image", "busybox"}
	o, err := parseCompareFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	if o.n != 50 || o.rounds != 5 || o.scalePods != 1000 || o.concurrency != 10 {
		t.Errorf("defaults: %+v", o)
	}
	for _, bad := range [][]string{
		{"-image", "busybox"},
		append(append([]string{}, base...), "-rounds", "60"),
		append(append([]string{}, base...), "-stop-timeout", "1500ms"),
		append(append([]string{}, base...), "-scale", "-1"),
		append(append([]string{}, base...), "extra"),
	} {
		if _, err := parseCompareFlags(bad); err == nil {
			t.Errorf("parseCompareFlags(%q) succeeded", bad)
		}
	}
}
