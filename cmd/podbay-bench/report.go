package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"time"
)

const (
	phaseMetric = "podbay_sandbox_phase_duration_seconds"
	rpcMetric   = "podbay_rpc_duration_seconds"
)

// rowWidth is the width of the report's first column.
const rowWidth = 24

// report is what one mode prints.
type report struct {
	mode        string // modePods or modeContainers
	concurrency int
	pods        int // lifecycles asked for
	completed   int // lifecycles done
	elapsed     time.Duration
	samples     map[string][]time.Duration
	exitCodes   map[int32]int // containers' exit codes after StopContainer
	err         error         // why the mode was aborted
	// Scrapes of the daemon's metrics before and after the mode; used only
	// when scraped is set.
	before, after metricSet
	scraped       bool
}

func (r report) print(w io.Writer) {
	status := ""
	if r.err != nil {
		status = ", ABORTED"
	}
	unit := "pods"
	if r.mode == modeContainers {
		unit = "pods with a container"
	}
	fmt.Fprintf(w, "\n== %s, concurrency %d: %d/%d %s in %.2f s, %.2f/s%s ==\n",
		r.mode, r.concurrency, r.completed, r.pods, unit, r.elapsed.Seconds(), float64(r.completed)/r.elapsed.Seconds(), status)
	if r.err != nil {
		fmt.Fprintf(w, "aborted: %v\n", r.err)
	}

	fmt.Fprintf(w, "%-*s %6s %9s %9s %9s", rowWidth, "RPC", "count", "p50 ms", "p95 ms", "max ms")
	if r.scraped {
		fmt.Fprintf(w, " %15s", "daemon mean ms")
	}
	fmt.Fprintln(w)
	for _, row := range rows(r.mode) {
		d := slices.Clone(r.samples[row])
		slices.Sort(d)
		fmt.Fprintf(w, "%-*s %6d %9s %9s %9s", rowWidth, row, len(d), ms(quantile(d, 0.5)), ms(quantile(d, 0.95)), ms(quantile(d, 1)))
		if r.scraped && !summed(row) {
			mean, _ := r.meanDelta(rpcMetric, "method", row)
			fmt.Fprintf(w, " %15s", msFloat(mean))
		}
		fmt.Fprintln(w)
	}
	if r.mode == modeContainers {
		r.printExitCodes(w)
	}

	if !r.scraped {
		return
	}
	keys := r.after.phases(phaseMetric)
	if len(keys) == 0 {
		fmt.Fprintf(w, "\ndaemon phases: the daemon exports no %s\n", phaseMetric)
		return
	}
	r.printPhaseTable(w, "daemon phases", phaseMetric, keys, 10, false)
	r.printContainerPhases(w)
}

// printPhaseTable prints a table of the phase summary metric's series keys
// under title: count and mean over this mode, p50/p95 since the daemon
// started; opWidth is the operation column's width. skipIdle leaves out
// the series this mode did not add to.
func (r report) printPhaseTable(w io.Writer, title, metric string, keys []phaseKey, opWidth int, skipIdle bool) {
	fmt.Fprintf(w, "\n%s, ms (p50/p95: summary since the daemon started; count, mean: this mode)\n", title)
	fmt.Fprintf(w, "%-*s %-15s %6s %9s %9s %9s\n", opWidth, "operation", "phase", "count", "p50", "p95", "mean")
	for _, k := range keys {
		labels := []string{"operation", k.operation, "phase", k.phase}
		p50, _ := r.after.get(metric, append(labels, "quantile", "0.5")...)
		p95, _ := r.after.get(metric, append(labels, "quantile", "0.95")...)
		mean, count := r.meanDelta(metric, labels...)
		if skipIdle && count == 0 {
			continue
		}
		fmt.Fprintf(w, "%-*s %-15s %6.0f %9s %9s %9s\n", opWidth, k.operation, k.phase, count, msFloat(p50), msFloat(p95), msFloat(mean))
	}
}

// summed reports whether row is not one RPC's, and so has no daemon
// figure: it adds up several RPCs, or times the container's process.
func summed(row string) bool {
	return row == rowPod || row == rowContainer || row == rowPodContainer || row == rowReady
}

// printExitCodes prints the containers' exit codes after StopContainer:
// anything but 0 means the stop was not the graceful one the bench means to
// time (137: the process ignored SIGTERM and was killed at the timeout).
func (r report) printExitCodes(w io.Writer) {
	codes := slices.Sorted(maps.Keys(r.exitCodes))
	fmt.Fprint(w, "exit codes after StopContainer:")
	if len(codes) == 0 {
		fmt.Fprint(w, " none recorded")
	}
	for _, c := range codes {
		fmt.Fprintf(w, " %d×%d", c, r.exitCodes[c])
	}
	fmt.Fprintln(w)
	for _, c := range codes {
		if c != 0 {
			fmt.Fprintf(w, "note: %d container(s) did not exit 0 on SIGTERM; their StopContainer latency is not a graceful stop's\n", r.exitCodes[c])
		}
	}
}

// meanDelta returns the mean and count of the observations the summary or
// histogram name{labels} got during the mode, from the change in its _sum
// and _count. The mean is NaN when there were none.
func (r report) meanDelta(name string, labels ...string) (mean, count float64) {
	sum1, _ := r.after.get(name+"_sum", labels...)
	cnt1, _ := r.after.get(name+"_count", labels...)
	sum0, _ := r.before.get(name+"_sum", labels...)
	cnt0, _ := r.before.get(name+"_count", labels...)
	count = cnt1 - cnt0
	if count <= 0 {
		return math.NaN(), 0
	}
	return (sum1 - sum0) / count, count
}

// quantile returns the q-quantile of sorted by the nearest-rank method, or
// -1 when there are no samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return -1
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// msFloat formats seconds as milliseconds; NaN (no observation in the
// summary's window) prints as "-".
func msFloat(sec float64) string {
	if math.IsNaN(sec) || math.IsInf(sec, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", sec*1000)
}
