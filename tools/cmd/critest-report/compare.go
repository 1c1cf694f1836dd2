package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// outcome is what one run made of one spec.
type outcome struct {
	state   string // passed, failed, skipped; "" when the run did not list it
	failure string // the failure's first line and location
}

// suiteRun is one side of a comparison.
type suiteRun struct {
	name                    string
	specs                   map[string]outcome
	passed, failed, skipped int
	runTime                 time.Duration
}

func readRun(arg string) (suiteRun, error) {
	name, file, ok := strings.Cut(arg, "=")
	if !ok || name == "" || file == "" {
		return suiteRun{}, fmt.Errorf("compare: want NAME=REPORT.json, got %q", arg)
	}
	reports, err := readReports(file)
	if err != nil {
		return suiteRun{}, err
	}
	r := suiteRun{name: name, specs: map[string]outcome{}}
	for _, rep := range reports {
		r.runTime += rep.RunTime
		for _, s := range rep.SpecReports {
			var o outcome
			switch {
			case s.State.Is(types.SpecStatePassed):
				o.state = "passed"
			case s.State.Is(types.SpecStateSkipped | types.SpecStatePending):
				o.state = "skipped"
			default:
				o.state = "failed"
				msg, _, _ := strings.Cut(strings.TrimSpace(s.Failure.Message), "\n")
				if len(msg) > 200 {
					msg = msg[:200] + " ..."
				}
				o.failure = fmt.Sprintf("%s (%s)", msg, s.Failure.Location)
			}
			if s.LeafNodeType == types.NodeTypeIt {
				switch o.state {
				case "passed":
					r.passed++
				case "failed":
					r.failed++
				default:
					r.skipped++
				}
			}
			r.specs[fullText(s)] = o
		}
	}
	return r, nil
}

func compare(args []string, out io.Writer) error {
	if len(args) != 2 {
		return errors.New("compare: want NAME=REPORT.json NAME=REPORT.json")
	}
	a, err := readRun(args[0])
	if err != nil {
		return err
	}
	b, err := readRun(args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "| | %s | %s |\n|---|---:|---:|\n", a.name, b.name)
	fmt.Fprintf(out, "| passed | %d | %d |\n| failed | %d | %d |\n| skipped (filtered out included) | %d | %d |\n| run time | %s | %s |\n",
		a.passed, b.passed, a.failed, b.failed, a.skipped, b.skipped,
		a.runTime.Round(time.Second), b.runTime.Round(time.Second))

	names := map[string]bool{}
	for n := range a.specs {
		names[n] = true
	}
	for n := range b.specs {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	show := func(o outcome) string {
		if o.state == "" {
			return "not listed"
		}
		return o.state
	}
	var differ, both []string
	worse := 0
	for _, n := range sorted {
		oa, ob := a.specs[n], b.specs[n]
		switch {
		case oa.state == "failed" && ob.state == "failed":
			both = append(both, fmt.Sprintf("%s\n    %s: %s\n    %s: %s", n, a.name, oa.failure, b.name, ob.failure))
		case oa.state != ob.state:
			line := fmt.Sprintf("%s: %s, %s: %s  %s", a.name, show(oa), b.name, show(ob), n)
			for _, side := range []struct {
				name string
				o    outcome
			}{{a.name, oa}, {b.name, ob}} {
				if side.o.failure != "" {
					line += fmt.Sprintf("\n    %s: %s", side.name, side.o.failure)
				}
			}
			differ = append(differ, line)
			if oa.state == "failed" && ob.state == "passed" {
				worse++
			}
		}
	}
	if len(differ) > 0 {
		fmt.Fprintf(out, "\nSpecs whose outcome differs (%d):\n", len(differ))
		for _, l := range differ {
			fmt.Fprintln(out, l)
		}
	}
	if len(both) > 0 {
		fmt.Fprintf(out, "\nSpecs that failed in both (%d):\n", len(both))
		for _, l := range both {
			fmt.Fprintln(out, l)
		}
	}
	fmt.Fprintf(out, "\n%d specs %s failed that %s passed\n", worse, a.name, b.name)
	if worse > 0 {
		return failedError{worse}
	}
	return nil
}
