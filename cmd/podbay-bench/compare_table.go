package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// goal is one of issue 26's targets.
type goal struct {
	kind  int     // goalNone, goalMaxRatio, goalMinRatio or goalFloorPlus
	limit float64 // the ratio, or the ms over the floor
}

const (
	goalNone      = iota
	goalMaxRatio  // p50 podbay / the best anchor <= limit
	goalMinRatio  // podbay / the best anchor >= limit (throughput)
	goalFloorPlus // podbay's p50 <= the runtime's floor (p50) + limit ms
)

func (g goal) String() string {
	switch g.kind {
	case goalMaxRatio:
		return fmt.Sprintf("≤ %.2g", g.limit)
	case goalMinRatio:
		return fmt.Sprintf("≥ %.2g", g.limit)
	case goalFloorPlus:
		return fmt.Sprintf("≤ floor + %g ms", g.limit)
	}
	return "—"
}

// tableRow is one line of the comparison: per column (side) a p50 and a
// p95 (or one value, p95 empty), in the row's unit.
type tableRow struct {
	name     string
	unit     string
	p50, p95 []float64 // per column; NaN: no value
	goal     goal
	higher   bool    // a higher value is better (throughput)
	floor    float64 // the floor's p50 (ms), for goalFloorPlus; NaN: not measured
}

// table is the comparison of one podbay side with the anchors.
type table struct {
	cols     []string // side names: the anchors, then the podbay side
	pb       int      // the podbay side's column
	headline []int    // the anchors' columns the ratio is against
	rows     []tableRow
	floor    string // the runtime alone (compare_floor.go); "" when not measured
	cniFloor string // the shared conflist alone (compare_cnifloor.go); "" when not measured
	cpuFloor string // the throughput target against the floors' CPU time (compare_cpu.go)
}

// best returns the best anchor's value of the row (the lowest, or the
// highest for a row where higher is better) and its column; NaN, -1 when
// no anchor has a value.
func (t table) best(r tableRow) (float64, int) {
	v, col := math.NaN(), -1
	for _, c := range t.headline {
		x := r.p50[c]
		if math.IsNaN(x) {
			continue
		}
		if col < 0 || (r.higher && x > v) || (!r.higher && x < v) {
			v, col = x, c
		}
	}
	return v, col
}

// ratio is podbay's p50 over the best anchor's.
func (t table) ratio(r tableRow) float64 {
	v, _ := t.best(r)
	return r.p50[t.pb] / v
}

// verdict is "met", "NOT MET", or "" without a goal; "-" without data.
func (t table) verdict(r tableRow) string {
	var met bool
	switch r.goal.kind {
	case goalNone:
		return ""
	case goalFloorPlus:
		pb := r.p50[t.pb]
		if math.IsNaN(pb) || math.IsNaN(r.floor) {
			return "-"
		}
		limit := r.floor + r.goal.limit
		if pb <= limit {
			return fmt.Sprintf("met (%.1f ≤ %.1f)", pb, limit)
		}
		return fmt.Sprintf("NOT MET (%.1f > %.1f)", pb, limit)
	}
	ratio := t.ratio(r)
	if math.IsNaN(ratio) || math.IsInf(ratio, 0) {
		return "-"
	}
	if r.goal.kind == goalMaxRatio {
		met = ratio <= r.goal.limit
	} else {
		met = ratio >= r.goal.limit
	}
	if met {
		return "met"
	}
	return "NOT MET"
}

// Row keys of the memory rows' targets.
const (
	rowDaemonRSSScale  = "daemon RSS at scale"
	rowMonitorRSSScale = "monitor RSS at scale"
)

// targets are issue 26's, by row (p50, podbay / the faster of containerd
// 2.4 and CRI-O, same network, same run).
var targets = map[string]goal{
	rpcRun:             {goalMaxRatio, 0.35},
	rpcStop:            {goalMaxRatio, 0.35},
	rowPullBig:         {goalMaxRatio, 0.5},
	rowScratchBig:      {goalMaxRatio, 0.5},
	rowCreateStart:     {goalFloorPlus, 5},
	rowThroughput:      {goalMinRatio, 2.5},
	rowMonitorRSSScale: {goalMaxRatio, 0.25},
	rowDaemonRSSScale:  {goalMaxRatio, 0.5},
}

func nans(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// buildTable builds the table of podbay side pb against the anchors of ts;
// floorP50 is the runtime's floor (ms; NaN when not measured).
func buildTable(o compareOptions, ts []*target, pb *target, floorP50 float64) table {
	var t table
	var cols []*target
	for _, x := range ts {
		if !isPodbay(x.name) {
			cols = append(cols, x)
		}
	}
	for i, x := range cols {
		if headlineAnchors[x.name] {
			t.headline = append(t.headline, i)
		}
	}
	if len(t.headline) == 0 {
		for i := range cols {
			t.headline = append(t.headline, i)
		}
	}
	t.pb = len(cols)
	cols = append(cols, pb)
	for _, x := range cols {
		t.cols = append(t.cols, x.name)
	}
	n := len(cols)
	latency := func(name string, per func(*target) []time.Duration, g goal) tableRow {
		r := tableRow{name: name, unit: "ms", p50: nans(n), p95: nans(n), goal: g, floor: floorP50}
		for c, x := range cols {
			d := slices.Clone(per(x))
			if len(d) == 0 {
				continue
			}
			slices.Sort(d)
			r.p50[c] = msOf(quantile(d, 0.5))
			r.p95[c] = msOf(quantile(d, 0.95))
		}
		return r
	}
	rows := []string{rpcRun, rpcStop, rpcRemove, rpcCreate, rpcStart, rowCreateStart, rpcStopCtr, rpcRemoveCtr,
		rpcPull, rowPullBig, rpcImageStatus, rpcPodStatus, rpcCtrStatus, rpcListPods, rpcListCtrs, rowScratch, rowScratchBig}
	for _, row := range rows {
		if (row == rowPullBig || row == rowScratchBig) && o.bigImage == "" {
			continue
		}
		name := row
		if row == rpcPull || row == rowScratch {
			name += " (busybox)"
		}
		t.rows = append(t.rows, latency(name, func(x *target) []time.Duration { return x.samples[row] }, targets[row]))
	}
	tp := tableRow{name: fmt.Sprintf("throughput %d-way (lifecycles/s)", o.concurrency),
		unit: "/s", p50: nans(n), p95: nans(n), goal: targets[rowThroughput], higher: true}
	for c, x := range cols {
		if len(x.rates) > 0 {
			r := slices.Sorted(slices.Values(x.rates))
			tp.p50[c] = r[(len(r)-1)/2]
			tp.p95[c] = r[0]
		}
	}
	t.rows = append(t.rows, tp)
	t.rows = append(t.rows, latency(fmt.Sprintf("lifecycle at %d-way (7 RPCs)", o.concurrency),
		func(x *target) []time.Duration { return x.samples[rowPodContainer] }, goal{}))
	if o.scalePods > 0 {
		for _, row := range []string{rpcListPods, rpcListCtrs, rpcPodStatus, rpcListStats} {
			t.rows = append(t.rows, latency(fmt.Sprintf("%s, %d pods", row, o.scalePods),
				func(x *target) []time.Duration { return x.scale[row] }, goal{}))
		}
	}
	memRow := func(name string, moment string, procs bool, g goal) tableRow {
		r := tableRow{name: name, unit: "MiB", p50: nans(n), p95: nans(n), goal: g}
		for c, x := range cols {
			m, ok := x.mem[moment]
			if !ok || !m.ok {
				continue
			}
			v := m.rss
			if procs {
				v = m.procRSS
			}
			r.p50[c] = float64(v) / (1 << 20)
		}
		return r
	}
	t.rows = append(t.rows,
		memRow("daemon RSS fresh (MiB)", memStart, false, goal{}),
		memRow("daemon RSS idle, after the rounds (MiB)", memIdle, false, goal{}))
	if o.scalePods > 0 {
		t.rows = append(t.rows,
			memRow(fmt.Sprintf("daemon RSS, %d pods (MiB)", o.scalePods), memScale, false, targets[rowDaemonRSSScale]),
			memRow(fmt.Sprintf("monitor processes' RSS, %d pods (MiB)", o.scalePods), memScale, true, targets[rowMonitorRSSScale]))
	}
	return t
}

func fmtVal(v float64, unit string) string {
	if math.IsNaN(v) {
		return "-"
	}
	switch {
	case unit == "MiB" || unit == "/s":
		return fmt.Sprintf("%.1f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// header is the table's first line: the operation, p50 and p95 per side,
// the ratio, the anchor it is against, the target and the verdict.
func (t table) header() []string {
	h := []string{"operation (ms unless noted)"}
	for _, c := range t.cols {
		h = append(h, c+" p50", "p95")
	}
	return append(h, t.cols[t.pb]+" / best anchor, p50", "best anchor", "target", "met")
}

func (t table) cells(r tableRow) []string {
	c := []string{r.name}
	for i := range t.cols {
		c = append(c, fmtVal(r.p50[i], r.unit), fmtVal(r.p95[i], r.unit))
	}
	best := "-"
	if _, col := t.best(r); col >= 0 {
		best = t.cols[col]
	}
	ratio := fmtRatio(t.ratio(r))
	if r.goal.kind == goalFloorPlus && best != "-" {
		// The target is against the floor, not an anchor: the ratio only
		// informs.
		ratio = "(" + ratio + ")"
	}
	return append(c, ratio, best, r.goal.String(), t.verdict(r))
}

// heading says which podbay the table is of.
func (t table) heading() string {
	switch t.cols[t.pb] {
	case "podbay-own":
		return "podbay on its own default network (NETWORK=own), the anchors on the shared conflist:"
	}
	return "every daemon on the same conflist (NETWORK=same):"
}

func (t table) printText(w io.Writer) {
	head := t.header()
	rows := [][]string{head}
	for _, r := range t.rows {
		rows = append(rows, t.cells(r))
	}
	widths := make([]int, len(head))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	textCols := len(head) - 3 // best anchor, target, met: left-aligned
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := widths[i] - len([]rune(c))
			if i == 0 || i >= textCols {
				b.WriteString(c + strings.Repeat(" ", pad))
			} else {
				b.WriteString(strings.Repeat(" ", pad) + c)
			}
			b.WriteString("  ")
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	met, total := t.score()
	fmt.Fprintf(w, "targets met: %d of %d\n", met, total)
	if t.floor != "" {
		fmt.Fprintln(w, t.floor)
	}
	if t.cniFloor != "" {
		fmt.Fprintln(w, t.cniFloor)
	}
	if t.cpuFloor != "" {
		fmt.Fprintln(w, t.cpuFloor)
	}
}

// legend explains the rows that are not one RPC's latency.
const legend = "best anchor: the faster of containerd 2 and CRI-O per row (the lower value; the higher for throughput), of the other anchors when neither ran. " +
	"throughput: the median round's rate under p50, the slowest round's under p95. " +
	"lifecycle at N-way: pod run, container create/start/stop/remove, pod stop/remove, the throughput block's. " +
	"from scratch: RunPodSandbox, PullImage (image absent), CreateContainer, StartContainer, until the process has logged. " +
	"RSS: the daemon process; monitor processes: the sum over its per-pod processes (containerd-shim-runc-v2 for containerd; conmon for CRI-O, and for podbay's oci handler)."

// score counts the rows with a target and those that meet it.
func (t table) score() (met, total int) {
	for _, r := range t.rows {
		v := t.verdict(r)
		if v == "" {
			continue
		}
		total++
		if strings.HasPrefix(v, "met") {
			met++
		}
	}
	return met, total
}

// printMarkdown writes the table with its heading, score and floor.
func (t table) printMarkdown(w io.Writer) {
	head := t.header()
	fmt.Fprintf(w, "%s\n\n", t.heading())
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---:|", len(head)-4)+"---|---|---|")
	for _, r := range t.rows {
		c := t.cells(r)
		if v := c[len(c)-1]; strings.HasPrefix(v, "NOT MET") {
			c[len(c)-1] = "**" + v + "**"
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	met, total := t.score()
	fmt.Fprintf(w, "\nTargets met: %d of %d.", met, total)
	if t.floor != "" {
		fmt.Fprintf(w, " The %s.", strings.TrimPrefix(t.floor, "floor: "))
	}
	if t.cniFloor != "" {
		fmt.Fprintf(w, " %s.", t.cniFloor)
	}
	if t.cpuFloor != "" {
		fmt.Fprintf(w, " %s.", t.cpuFloor)
	}
	fmt.Fprint(w, "\n\n")
}

// printDetails prints what the table leaves out: sample counts, the
// scale phase's p99 on both sides, memory as PSS and process counts, and
// the exit codes of the stopped containers.
func printDetails(w io.Writer, o compareOptions, ts []*target) {
	fmt.Fprintln(w, "\ndetails:")
	for _, t := range ts {
		fmt.Fprintf(w, "  %-12s samples:", t.name)
		for _, row := range slices.Sorted(maps.Keys(t.samples)) {
			fmt.Fprintf(w, " %s %d,", row, len(t.samples[row]))
		}
		fmt.Fprintf(w, " throughput rounds %d\n", len(t.rates))
		fmt.Fprintf(w, "  %-12s exit codes after StopContainer:", t.name)
		for _, c := range slices.Sorted(maps.Keys(t.exitCodes)) {
			fmt.Fprintf(w, " %d×%d", c, t.exitCodes[c])
		}
		fmt.Fprintln(w)
		if o.scalePods > 0 {
			fmt.Fprintf(w, "  %-12s %d pods: up in %.1f s, down in %.1f s; p50/p95/p99 ms:", t.name, o.scalePods, t.scaleUp.Seconds(), t.scaleDown.Seconds())
			for _, row := range []string{rpcListPods, rpcListCtrs, rpcPodStatus, rpcListStats} {
				d := slices.Sorted(slices.Values(t.scale[row]))
				fmt.Fprintf(w, " %s %s/%s/%s", row, ms(quantile(d, 0.5)), ms(quantile(d, 0.95)), ms(quantile(d, 0.99)))
			}
			fmt.Fprintln(w)
		}
		for _, moment := range []string{memStart, memIdle, memScale} {
			m, ok := t.mem[moment]
			if !ok || !m.ok {
				continue
			}
			fmt.Fprintf(w, "  %-12s memory %-5s daemon RSS %.1f MiB, PSS %.1f MiB; %d per-pod processes RSS %.1f MiB, PSS %.1f MiB\n",
				t.name, moment, mib(m.rss), mib(m.pss), m.procs, mib(m.procRSS), mib(m.procPSS))
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// printPhases prints podbay's per-phase latencies over the rounds: the
// mean from the change in each summary's sum and count, and the daemon's
// own p50/p95 (since it started).
func printPhases(w io.Writer, before, after metricSet) {
	r := report{before: before, after: after, scraped: true}
	for _, metric := range []string{phaseMetric, "podbay_container_phase_duration_seconds", "podbay_image_phase_duration_seconds"} {
		keys := after.phases(metric)
		if len(keys) == 0 {
			continue
		}
		fmt.Fprintf(w, "\npodbay %s over the rounds, ms (mean: the rounds; p50/p95: since the daemon started)\n", metric)
		fmt.Fprintf(w, "%-10s %-15s %6s %9s %9s %9s\n", "operation", "phase", "count", "mean", "p50", "p95")
		for _, k := range keys {
			labels := []string{"operation", k.operation, "phase", k.phase}
			p50, _ := after.get(metric, append(labels, "quantile", "0.5")...)
			p95, _ := after.get(metric, append(labels, "quantile", "0.95")...)
			mean, count := r.meanDelta(metric, labels...)
			fmt.Fprintf(w, "%-10s %-15s %6.0f %9s %9s %9s\n", k.operation, k.phase, count, msFloat(mean), msFloat(p50), msFloat(p95))
		}
	}
	fmt.Fprintf(w, "\npodbay %s over the rounds, mean ms (daemon side)\n", rpcMetric)
	for _, m := range []string{rpcRun, rpcStop, rpcRemove, rpcCreate, rpcStart, rpcStopCtr, rpcRemoveCtr, rpcPull} {
		mean, count := r.meanDelta(rpcMetric, "method", m)
		fmt.Fprintf(w, "  %-18s %6.0f calls, mean %s\n", m, count, msFloat(mean))
	}
}
