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

// goal is one of issue 12's targets.
type goal struct {
	kind  int     // goalNone, goalMaxRatio, goalMinRatio or goalP99
	limit float64 // the ratio, or the p99 in ms
}

const (
	goalNone     = iota
	goalMaxRatio // p50 podbay/containerd <= limit
	goalMinRatio // podbay/containerd >= limit (throughput)
	goalP99      // podbay's p99 < limit ms
)

func (g goal) String() string {
	switch g.kind {
	case goalMaxRatio:
		return fmt.Sprintf("≤ %.1f", g.limit)
	case goalMinRatio:
		return fmt.Sprintf("≥ %.1f", g.limit)
	case goalP99:
		return fmt.Sprintf("p99 < %g ms", g.limit)
	}
	return "—"
}

// tableRow is one line of the comparison: per side a p50 and a p95 (or
// one value, p95 empty), in the row's unit.
type tableRow struct {
	name     string
	unit     string
	p50, p95 [sides]float64 // NaN: no value
	p99      float64        // podbay's, for goalP99
	goal     goal
}

func (r tableRow) ratio() float64 {
	return r.p50[sidePodbay] / r.p50[sideContainerd]
}

// verdict is "met", "NOT MET", or "" without a goal; "-" without data.
func (r tableRow) verdict() string {
	if r.goal.kind == goalNone {
		return ""
	}
	ratio := r.ratio()
	var met bool
	switch r.goal.kind {
	case goalMaxRatio:
		if math.IsNaN(ratio) || math.IsInf(ratio, 0) {
			return "-"
		}
		met = ratio <= r.goal.limit
	case goalMinRatio:
		if math.IsNaN(ratio) || math.IsInf(ratio, 0) {
			return "-"
		}
		met = ratio >= r.goal.limit
	case goalP99:
		if math.IsNaN(r.p99) {
			return "-"
		}
		v := fmt.Sprintf("(p99 %.2f ms)", r.p99)
		if r.p99 < r.goal.limit {
			return "met " + v
		}
		return "NOT MET " + v
	}
	if met {
		return "met"
	}
	return "NOT MET"
}

type table struct {
	rows  []tableRow
	floor string // the runtime alone (compare_floor.go); "" when not measured
}

// targets are issue 12's, by row.
var targets = map[string]goal{
	rpcRun:          {goalMaxRatio, 0.5},
	rpcStop:         {goalMaxRatio, 0.4},
	rpcRemove:       {goalMaxRatio, 0.5},
	rowCreateStart:  {goalMaxRatio, 0.5},
	rpcStopCtr:      {goalMaxRatio, 0.5},
	rpcRemoveCtr:    {goalMaxRatio, 1.0},
	rpcPull:         {goalMaxRatio, 0.5},
	rowScratch:      {goalMaxRatio, 0.4},
	rowThroughput:   {goalMinRatio, 2.0},
	"RSS":           {goalMaxRatio, 1.0},
	"scale":         {goalP99, 5},
	rowPodContainer: {},
}

func nan2() [sides]float64 { return [sides]float64{math.NaN(), math.NaN()} }

func latencyRow(name string, per func(*target) []time.Duration, ts [sides]*target, g goal) tableRow {
	r := tableRow{name: name, unit: "ms", p50: nan2(), p95: nan2(), p99: math.NaN(), goal: g}
	for s, t := range ts {
		d := slices.Clone(per(t))
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		r.p50[s] = msOf(quantile(d, 0.5))
		r.p95[s] = msOf(quantile(d, 0.95))
		if s == sidePodbay {
			r.p99 = msOf(quantile(d, 0.99))
		}
	}
	return r
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func buildTable(o compareOptions, ts [sides]*target) table {
	var t table
	for _, row := range []string{rpcRun, rpcStop, rpcRemove, rpcCreate, rpcStart, rowCreateStart, rpcStopCtr, rpcRemoveCtr,
		rpcPull, rpcImageStatus, rpcPodStatus, rpcCtrStatus, rpcListPods, rpcListCtrs, rowScratch} {
		t.rows = append(t.rows, latencyRow(row, func(x *target) []time.Duration { return x.samples[row] }, ts, targets[row]))
	}
	tp := tableRow{name: fmt.Sprintf("throughput %d-way (lifecycles/s)", o.concurrency),
		unit: "/s", p50: nan2(), p95: nan2(), p99: math.NaN(), goal: targets[rowThroughput]}
	for s, x := range ts {
		if len(x.rates) > 0 {
			r := slices.Sorted(slices.Values(x.rates))
			tp.p50[s] = r[(len(r)-1)/2]
			tp.p95[s] = r[0]
		}
	}
	t.rows = append(t.rows, tp)
	t.rows = append(t.rows, latencyRow(fmt.Sprintf("lifecycle at %d-way (7 RPCs)", o.concurrency),
		func(x *target) []time.Duration { return x.samples[rowPodContainer] }, ts, goal{}))
	if o.scalePods > 0 {
		for _, row := range []string{rpcListPods, rpcListCtrs, rpcPodStatus, rpcListStats} {
			t.rows = append(t.rows, latencyRow(fmt.Sprintf("%s, %d pods", row, o.scalePods),
				func(x *target) []time.Duration { return x.scale[row] }, ts, targets["scale"]))
		}
	}
	memRow := func(name string, moment string, procs bool, g goal) tableRow {
		r := tableRow{name: name, unit: "MiB", p50: nan2(), p95: nan2(), p99: math.NaN(), goal: g}
		for s, x := range ts {
			m, ok := x.mem[moment]
			if !ok || !m.ok {
				continue
			}
			v := m.rss
			if procs {
				v = m.procRSS
			}
			r.p50[s] = float64(v) / (1 << 20)
		}
		return r
	}
	t.rows = append(t.rows,
		memRow("daemon RSS fresh (MiB)", memStart, false, targets["RSS"]),
		memRow("daemon RSS idle, after the rounds (MiB)", memIdle, false, targets["RSS"]))
	if o.scalePods > 0 {
		t.rows = append(t.rows,
			memRow(fmt.Sprintf("daemon RSS, %d pods (MiB)", o.scalePods), memScale, false, targets["RSS"]),
			memRow(fmt.Sprintf("shims vs conmons RSS, %d pods (MiB)", o.scalePods), memScale, true, goal{}))
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

func (t table) cells(r tableRow) []string {
	return []string{
		r.name,
		fmtVal(r.p50[sideContainerd], r.unit), fmtVal(r.p95[sideContainerd], r.unit),
		fmtVal(r.p50[sidePodbay], r.unit), fmtVal(r.p95[sidePodbay], r.unit),
		fmtRatio(r.ratio()), r.goal.String(), r.verdict(),
	}
}

var tableHeader = []string{"operation (ms unless noted)", "containerd p50", "p95", "podbay p50", "p95", "podbay/containerd p50", "target", "met"}

func (t table) printText(w io.Writer) {
	rows := [][]string{tableHeader}
	for _, r := range t.rows {
		rows = append(rows, t.cells(r))
	}
	widths := make([]int, len(tableHeader))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := widths[i] - len([]rune(c))
			if i == 0 || i >= 6 {
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
	fmt.Fprintln(w, legend)
}

// legend explains the rows that are not one RPC's latency.
const legend = "throughput: the median round's rate under p50, the slowest round's under p95. " +
	"lifecycle at N-way: pod run, container create/start/stop/remove, pod stop/remove, the throughput block's. " +
	"from scratch: RunPodSandbox, PullImage (image absent), CreateContainer, StartContainer, until the process has logged. " +
	"RSS: the daemon process; shims vs conmons: the sum over its per-pod processes (containerd-shim-runc-v2 for containerd; conmon, or the shim for a vm handler, for podbay)."

// score counts the rows with a target and those that meet it.
func (t table) score() (met, total int) {
	for _, r := range t.rows {
		v := r.verdict()
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

func (t table) printMarkdown(w io.Writer, o compareOptions) {
	if o.title != "" {
		fmt.Fprintf(w, "%s\n\n", o.title)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(tableHeader, " | "))
	fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---:|", 5)+"---|---|")
	for _, r := range t.rows {
		c := t.cells(r)
		if strings.HasPrefix(c[7], "NOT MET") {
			c[7] = "**" + c[7] + "**"
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	met, total := t.score()
	fmt.Fprintf(w, "\nTargets met: %d of %d. ", met, total)
	if t.floor != "" {
		fmt.Fprintf(w, "The %s. ", strings.TrimPrefix(t.floor, "floor: "))
	}
	fmt.Fprint(w, legend)
	for _, n := range o.notes {
		fmt.Fprintf(w, " %s", n)
	}
	fmt.Fprintln(w)
}

// printDetails prints what the table leaves out: sample counts, the
// scale phase's p99 on both sides, memory as PSS and process counts, and
// the exit codes of the stopped containers.
func printDetails(w io.Writer, o compareOptions, ts [sides]*target) {
	fmt.Fprintln(w, "\ndetails:")
	for _, t := range ts {
		fmt.Fprintf(w, "  %-10s samples:", t.name)
		for _, row := range slices.Sorted(maps.Keys(t.samples)) {
			fmt.Fprintf(w, " %s %d,", row, len(t.samples[row]))
		}
		fmt.Fprintf(w, " throughput rounds %d\n", len(t.rates))
		fmt.Fprintf(w, "  %-10s exit codes after StopContainer:", t.name)
		for _, c := range slices.Sorted(maps.Keys(t.exitCodes)) {
			fmt.Fprintf(w, " %d×%d", c, t.exitCodes[c])
		}
		fmt.Fprintln(w)
		if o.scalePods > 0 {
			fmt.Fprintf(w, "  %-10s %d pods: up in %.1f s, down in %.1f s; p50/p95/p99 ms:", t.name, o.scalePods, t.scaleUp.Seconds(), t.scaleDown.Seconds())
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
			fmt.Fprintf(w, "  %-10s memory %-5s daemon RSS %.1f MiB, PSS %.1f MiB; %d per-pod processes RSS %.1f MiB, PSS %.1f MiB\n",
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
