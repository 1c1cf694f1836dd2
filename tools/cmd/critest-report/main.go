// Command critest-report summarises a critest run for hack/critest.sh.
//
//	critest-report specs [--allow REGEXP]... REPORT.json
//
// reads the ginkgo JSON report critest wrote (--ginkgo.json-report), prints
// every spec that did not pass with its failure and location, and ends with
// the line "N passed, N failed, N skipped". Failures whose full spec text
// matches an --allow expression are listed as allowed; the exit status is 1
// when any other spec failed (or the suite itself did), else 0.
//
//	critest-report bench DIR [REPORT.json]
//
// prints, for each *_benchmark_data.json critest -benchmark wrote to DIR
// (--benchmarking-output-dir), the p50, p95 and maximum of each operation in
// milliseconds, and the measurements (gmeasure) in the ginkgo report.
//
//	critest-report compare NAME=REPORT.json NAME=REPORT.json
//
// sets two runs of one suite side by side (hack/e2e-node.sh: podbay and
// containerd on the same machine): each run's counts and run time, every
// spec whose outcome differs, with the failure, and the specs that failed
// in both. The exit status is 1 when the first run failed a spec the
// second passed, else 0.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/formatter"
	"github.com/onsi/ginkgo/v2/types"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		var fe failedError
		if !errors.As(err, &fe) {
			fmt.Fprintln(os.Stderr, "critest-report:", err)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// failedError means specs failed that the allow-list does not cover.
type failedError struct{ n int }

func (e failedError) Error() string { return fmt.Sprintf("%d unexpected failures", e.n) }

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: critest-report specs [--allow REGEXP]... REPORT.json | bench DIR [REPORT.json] | compare NAME=REPORT.json NAME=REPORT.json")
	}
	switch args[0] {
	case "specs":
		return specs(args[1:], out)
	case "bench":
		return bench(args[1:], out)
	case "compare":
		return compare(args[1:], out)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func readReports(file string) ([]types.Report, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	return reports, nil
}

// fullText names a spec the way ginkgo's summary and --ginkgo.focus do.
func fullText(s types.SpecReport) string {
	if s.LeafNodeType != types.NodeTypeIt {
		return fmt.Sprintf("[%s] %s", s.LeafNodeType, s.FullText())
	}
	return s.FullText()
}

func specs(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("specs", flag.ContinueOnError)
	var allow multiFlag
	fs.Var(&allow, "allow", "`regexp` matching the full text of a spec whose failure is accepted (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("specs: want one REPORT.json")
	}
	var allowed []*regexp.Regexp
	for _, a := range allow {
		re, err := regexp.Compile(a)
		if err != nil {
			return fmt.Errorf("--allow %q: %w", a, err)
		}
		allowed = append(allowed, re)
	}
	reports, err := readReports(fs.Arg(0))
	if err != nil {
		return err
	}

	var passed, failed, skipped, unexpected int
	var lines []string
	for _, r := range reports {
		for _, s := range r.SpecReports {
			isSpec := s.LeafNodeType == types.NodeTypeIt
			switch {
			case s.State.Is(types.SpecStatePassed):
				if isSpec {
					passed++
				}
				continue
			case s.State.Is(types.SpecStateSkipped | types.SpecStatePending):
				if isSpec {
					skipped++
				}
				continue
			}
			// A failure: a spec's, or a suite node's (BeforeSuite, ...).
			if isSpec {
				failed++
			}
			name := fullText(s)
			verdict := "FAIL"
			if matchesAny(allowed, name) {
				verdict = "FAIL (allowed)"
			} else {
				unexpected++
			}
			msg := strings.TrimSpace(s.Failure.Message)
			if len(msg) > 600 {
				msg = msg[:600] + " ..."
			}
			lines = append(lines, fmt.Sprintf("%s [%s] %s\n    at %s\n    %s", verdict, s.State, name,
				s.Failure.Location, strings.ReplaceAll(msg, "\n", "\n    ")))
		}
	}
	sort.Strings(lines)
	if len(lines) > 0 {
		fmt.Fprintln(out, "Specs that did not pass:")
		for _, l := range lines {
			fmt.Fprintln(out, l)
		}
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if unexpected > 0 {
		return failedError{unexpected}
	}
	return nil
}

func matchesAny(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// resultsSet is cri-tools' LifecycleBenchmarksResultsSet.
type resultsSet struct {
	OperationsNames []string `json:"operationsNames"`
	NumParallel     int      `json:"numParallel"`
	Datapoints      []struct {
		OperationsDurationsNs []int64 `json:"operationsDurationsNs"`
	} `json:"datapoints"`
}

func bench(args []string, out io.Writer) error {
	if len(args) < 1 || len(args) > 2 {
		return errors.New("bench: want DIR [REPORT.json]")
	}
	files, err := filepath.Glob(filepath.Join(args[0], "*_benchmark_data.json"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var rs resultsSet
		if err := json.Unmarshal(data, &rs); err != nil {
			return fmt.Errorf("parse %s: %w", f, err)
		}
		fmt.Fprintf(out, "%s (%d samples, %d in parallel):\n", strings.TrimSuffix(filepath.Base(f), "_benchmark_data.json"), len(rs.Datapoints), rs.NumParallel)
		for i, op := range rs.OperationsNames {
			var ds []time.Duration
			for _, d := range rs.Datapoints {
				if i < len(d.OperationsDurationsNs) {
					ds = append(ds, time.Duration(d.OperationsDurationsNs[i]))
				}
			}
			if len(ds) == 0 {
				continue
			}
			sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
			fmt.Fprintf(out, "  %-16s p50 %8.1f ms   p95 %8.1f ms   max %8.1f ms\n", op,
				ms(quantile(ds, 0.50)), ms(quantile(ds, 0.95)), ms(ds[len(ds)-1]))
		}
	}
	if len(args) == 2 {
		reports, err := readReports(args[1])
		if err != nil {
			return err
		}
		plain := formatter.NewWithNoColorBool(true)
		for _, r := range reports {
			for _, s := range r.SpecReports {
				for _, e := range s.ReportEntries {
					if v := strings.TrimSpace(plain.F(e.StringRepresentation())); v != "" {
						fmt.Fprintf(out, "%s:\n%s\n", s.LeafNodeText, v)
					}
				}
			}
		}
	}
	return nil
}

// quantile returns the nearest-rank q-quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	i := int(float64(len(ds))*q+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(ds) {
		i = len(ds) - 1
	}
	return ds[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
