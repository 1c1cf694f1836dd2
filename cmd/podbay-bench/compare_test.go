package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCompareVerdict(t *testing.T) {
	nan := math.NaN()
	// Columns: containerd2, crio (the headline anchors), podbay.
	tbl := table{cols: []string{"containerd2", "crio", "podbay"}, pb: 2, headline: []int{0, 1}}
	for _, tc := range []struct {
		name      string
		ctr, crio float64
		pb        float64
		floor     float64
		higher    bool
		g         goal
		want      string
		wantText  string
		wantBest  string
	}{
		{"ratio met against the faster", 100, 80, 28, nan, false, goal{goalMaxRatio, 0.35}, "met", "≤ 0.35", "crio"},
		{"ratio at the limit", 100, 200, 35, nan, false, goal{goalMaxRatio, 0.35}, "met", "≤ 0.35", "containerd2"},
		{"ratio not met", 100, 120, 36, nan, false, goal{goalMaxRatio, 0.35}, "NOT MET", "≤ 0.35", "containerd2"},
		{"throughput met", 2, 1, 5, nan, true, goal{goalMinRatio, 2.5}, "met", "≥ 2.5", "containerd2"},
		{"throughput not met", 2, 3, 7, nan, true, goal{goalMinRatio, 2.5}, "NOT MET", "≥ 2.5", "crio"},
		{"floor met", 50, 60, 9, 4.5, false, goal{goalFloorPlus, 5}, "met (9.0 ≤ 9.5)", "≤ floor + 5 ms", "containerd2"},
		{"floor not met", 50, 60, 9.6, 4.5, false, goal{goalFloorPlus, 5}, "NOT MET (9.6 > 9.5)", "≤ floor + 5 ms", "containerd2"},
		{"no floor", 50, 60, 9, nan, false, goal{goalFloorPlus, 5}, "-", "≤ floor + 5 ms", "containerd2"},
		{"one anchor only", nan, 10, 3, nan, false, goal{goalMaxRatio, 0.5}, "met", "≤ 0.5", "crio"},
		{"no anchor value", nan, nan, 1, nan, false, goal{goalMaxRatio, 1}, "-", "≤ 1", "-"},
		{"no goal", 1, 2, 2, nan, false, goal{}, "", "—", "containerd2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tableRow{p50: []float64{tc.ctr, tc.crio, tc.pb}, p95: nans(3), goal: tc.g, higher: tc.higher, floor: tc.floor}
			if got := tbl.verdict(r); got != tc.want {
				t.Errorf("verdict = %q, want %q", got, tc.want)
			}
			if got := tc.g.String(); got != tc.wantText {
				t.Errorf("goal = %q, want %q", got, tc.wantText)
			}
			if got := tbl.cells(r)[8]; got != tc.wantBest {
				t.Errorf("best anchor = %q, want %q", got, tc.wantBest)
			}
		})
	}
}

func TestCompareTable(t *testing.T) {
	o := compareOptions{concurrency: 10, rounds: 2, scalePods: 3, bigImage: "big", title: "a run", notes: []string{"a note."}}
	mk := func(name string, run time.Duration, rss int64) *target {
		return &target{
			name:    name,
			samples: map[string][]time.Duration{rpcRun: {run, run, 3 * run}, rowPullBig: {10 * run}},
			rates:   []float64{1, 2},
			scale:   map[string][]time.Duration{rpcListPods: {run / 10}},
			mem:     map[string]memSample{memScale: {ok: true, rss: rss, procRSS: rss / 2}},
		}
	}
	ts := []*target{
		mk("containerd2", 100*time.Millisecond, 100<<20),
		mk("crio", 80*time.Millisecond, 80<<20),
		mk("containerd16", 10*time.Millisecond, 10<<20),
		mk("podbay", 28*time.Millisecond, 30<<20),
		mk("podbay-own", 20*time.Millisecond, 30<<20),
	}
	tbl := buildTable(o, ts, ts[3], 4)
	if got := strings.Join(tbl.cols, " "); got != "containerd2 crio containerd16 podbay" {
		t.Errorf("columns %q", got)
	}
	var text, md strings.Builder
	tbl.printText(&text)
	tbl.printMarkdown(&md)
	for _, want := range []string{
		"RunPodSandbox", "100", "300", "80.0", "28.0", "0.35", "≤ 0.35", "crio",
		"PullImage (realistic)", "ListPodSandbox, 3 pods",
		"daemon RSS, 3 pods (MiB)", "monitor processes' RSS, 3 pods (MiB)",
		"throughput 10-way (lifecycles/s)", "podbay / best anchor, p50",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
	}
	// Run (0.35: met), pull realistic (0.35: met), throughput (1.0 < 2.5),
	// daemon RSS (30/80 ≤ 0.5: met), monitor RSS (15/40 > 0.25); Stop,
	// from scratch and Create+Start have no data ("-", counted).
	if !strings.Contains(text.String(), "targets met: 3 of 8") {
		t.Errorf("score line:\n%s", text.String())
	}
	if !strings.HasPrefix(md.String(), "every daemon on the same conflist") ||
		!strings.Contains(md.String(), "| RunPodSandbox | 100 | 300 | 80.0 | 240 | 10.0 | 30.0 | 28.0 | 84.0 | 0.35 | crio | ≤ 0.35 | met |") ||
		!strings.Contains(md.String(), "**NOT MET**") {
		t.Errorf("markdown:\n%s", md.String())
	}
	own := buildTable(o, ts, ts[4], 4)
	if own.cols[own.pb] != "podbay-own" || !strings.Contains(own.heading(), "own default network") {
		t.Errorf("the podbay-own table: %v, %q", own.cols, own.heading())
	}
	// Without the headline anchors, the ratio is against the others.
	alone := buildTable(o, []*target{ts[2], ts[3]}, ts[3], 4)
	if v, col := alone.best(alone.rows[0]); v != 10 || col != 0 {
		t.Errorf("best without headline anchors = %v, %d", v, col)
	}
}

func TestParseCompareFlags(t *testing.T) {
	base := []string{"-crio-socket", "/c.sock", "-crio-log-dir", "/c", "-podbay-socket", "/p.sock", "-podbay-log-dir", "/p", "-image", "busybox"}
	o, err := parseCompareFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	if o.n != 50 || o.bigN != 50 || o.rounds != 5 || o.scalePods != 300 || o.concurrency != 10 {
		t.Errorf("defaults: %+v", o)
	}
	if len(o.sides) != 2 || o.sides[0].name != "crio" || o.sides[1].name != "podbay" {
		t.Errorf("sides: %+v", o.sides)
	}
	for _, bad := range [][]string{
		{"-image", "busybox"},
		{"-podbay-socket", "/p.sock", "-podbay-log-dir", "/p", "-image", "busybox"},
		{"-crio-socket", "/c.sock", "-crio-log-dir", "/c", "-image", "busybox"},
		{"-crio-socket", "/c.sock", "-podbay-socket", "/p.sock", "-podbay-log-dir", "/p", "-image", "busybox"},
		append(append([]string{}, base...), "-rounds", "60"),
		append(append([]string{}, base...), "-big-image", "big", "-big-n", "2"),
		append(append([]string{}, base...), "-stop-timeout", "1500ms"),
		append(append([]string{}, base...), "-scale", "-1"),
		append(append([]string{}, base...), "extra"),
	} {
		if _, err := parseCompareFlags(bad); err == nil {
			t.Errorf("parseCompareFlags(%q) succeeded", bad)
		}
	}
}

func TestCNIFloorReport(t *testing.T) {
	o := compareOptions{concurrency: 10, rounds: 1}
	mk := func(name string, run, stop time.Duration) *target {
		return &target{name: name, samples: map[string][]time.Duration{rpcRun: {run}, rpcStop: {stop}}}
	}
	ts := []*target{
		mk("containerd2", 100*time.Millisecond, 40*time.Millisecond),
		mk("crio", 80*time.Millisecond, 60*time.Millisecond),
		mk("podbay", 50*time.Millisecond, 20*time.Millisecond),
	}
	tbl := buildTable(o, ts, ts[2], math.NaN())
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	// RunPodSandbox: 0.35 × crio's 80 = 28 ms, the ADD's p50 30: 2 below.
	// StopPodSandbox: 0.35 × containerd2's 40 = 14 ms, the DEL's p50 10: 4
	// above.
	got := cniFloorReport(tbl, "pbcmp-floor", ms(40, 30, 20), ms(10, 12, 8))
	for _, want := range []string{
		"CNI floor: the shared conflist's ADD alone (network pbcmp-floor; libcni, no daemon or runtime; 3 samples): p50 30.0 ms (p95 40.0), DEL alone p50 10.0 ms (p95 12.0)",
		"; RunPodSandbox's target is 28.0 ms (0.35 × crio's 80.0) — 2.0 ms below the ADD alone, out of reach on this network",
		"; StopPodSandbox's target is 14.0 ms (0.35 × containerd2's 40.0) — 4.0 ms above the DEL alone",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "out of reach") != 1 {
		t.Errorf("report: %s", got)
	}
	if got := cniFloorReport(tbl, "pbcmp-floor", nil, nil); got != "" {
		t.Errorf("report without samples = %q", got)
	}
	// Without anchor values, only the floor's own numbers.
	bare := buildTable(o, []*target{{name: "crio"}, ts[2]}, ts[2], math.NaN())
	if got := cniFloorReport(bare, "n", ms(5), ms(3)); strings.Contains(got, "target") {
		t.Errorf("report without anchors: %s", got)
	}
	tbl.cniFloor = got
	var text, md strings.Builder
	tbl.printText(&text)
	tbl.printMarkdown(&md)
	if !strings.Contains(text.String(), "\nCNI floor: the shared conflist's") || !strings.Contains(md.String(), " CNI floor: the shared conflist's ADD alone (network pbcmp-floor;") {
		t.Errorf("tables:\n%s\n%s", text.String(), md.String())
	}
}

func TestParseCompareFlagsCNIFloor(t *testing.T) {
	base := []string{"-crio-socket", "/c.sock", "-crio-log-dir", "/c", "-podbay-socket", "/p.sock", "-podbay-log-dir", "/p", "-image", "busybox"}
	o, err := parseCompareFlags(append(slices.Clone(base), "-cni-floor-conflist", "/f.conflist", "-cni-floor-cache-dir", "/cache", "-cni-floor-netns-dir", "/netns"))
	if err != nil {
		t.Fatal(err)
	}
	if o.cniFloorBinDirs != "/usr/lib/cni:/opt/cni/bin" || o.cniFloorCacheDir != "/cache" || o.cniFloorNetnsDir != "/netns" {
		t.Errorf("options: %+v", o)
	}
	if _, err := parseCompareFlags(append(slices.Clone(base), "-cni-floor-conflist", "/f.conflist")); err == nil {
		t.Error("-cni-floor-conflist without its dirs accepted")
	}
}

func TestThroughputBound(t *testing.T) {
	o := compareOptions{concurrency: 10, rounds: 1}
	ts := []*target{{name: "containerd2", rates: []float64{5}}, {name: "crio", rates: []float64{8}}, {name: "podbay", rates: []float64{11}}}
	tbl := buildTable(o, ts, ts[2], math.NaN())
	// 2.5 × crio's 8 = 20/s: on 2 CPUs, 100 ms of CPU per lifecycle.
	got := throughputBound(tbl, 2, 60, 50)
	for _, want := range []string{"target is 20.0/s (2.5 × crio's 8.0)", "on 2 CPUs leaves a lifecycle 100.0 ms of CPU time",
		"the floors alone take 110.0 ms (the conflist's ADD + DEL 50.0, runc's create + start + delete 60.0", "over it: out of reach"} {
		if !strings.Contains(got, want) {
			t.Errorf("bound lacks %q:\n%s", want, got)
		}
	}
	if got := throughputBound(tbl, 4, 60, 50); !strings.HasSuffix(got, "within it") {
		t.Errorf("4 CPUs: %s", got)
	}
	if got := throughputBound(tbl, 2, math.NaN(), 50); got != "" {
		t.Errorf("without the runc floor: %q", got)
	}
	bare := buildTable(o, []*target{{name: "crio"}, ts[2]}, ts[2], math.NaN())
	if got := throughputBound(bare, 2, 60, 50); got != "" {
		t.Errorf("without an anchor's throughput: %q", got)
	}
}
