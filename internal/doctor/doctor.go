// Package doctor is `podbay doctor`: it checks a host for what podbayd
// needs (runtimes, conmon, CNI, cgroups, kernel features, ports,
// capabilities, directories) and reports what of podbay's is left on the
// host that no record owns (namespaces, mounts, IPs, veths, iptables
// rules, processes, directories). It only reads: nothing on the host is
// changed, whether the daemon runs or not.
//
// The host is probed through small interfaces (Probe for the checks, the
// Inventory a Scanner fills for the leak report), so that every verdict and
// every classification has unit tests on fakes.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Verdict is a check's outcome.
type Verdict string

// Verdicts, from good to bad.
const (
	OK   Verdict = "OK"
	Warn Verdict = "WARN"
	Fail Verdict = "FAIL"
)

// Result is one host check's outcome.
type Result struct {
	// Check names what was checked ("conmon", "runtime runc", …).
	Check   string  `json:"check"`
	Verdict Verdict `json:"verdict"`
	// Reason is one line saying what was found.
	Reason string `json:"reason"`
	// Fix is a hint for WARN and FAIL.
	Fix string `json:"fix,omitempty"`
}

func ok(check, reason string, args ...any) Result {
	return Result{Check: check, Verdict: OK, Reason: fmt.Sprintf(reason, args...)}
}

func warn(check, fix, reason string, args ...any) Result {
	return Result{Check: check, Verdict: Warn, Reason: fmt.Sprintf(reason, args...), Fix: fix}
}

func fail(check, fix, reason string, args ...any) Result {
	return Result{Check: check, Verdict: Fail, Reason: fmt.Sprintf(reason, args...), Fix: fix}
}

// Leak kinds.
const (
	KindNetns    = "netns"
	KindMount    = "mount"
	KindRootfs   = "rootfs"
	KindIPAM     = "ip"
	KindCNICache = "cni-cache"
	KindVeth     = "veth"
	KindIptables = "iptables"
	KindProcess  = "process"
	KindDir      = "dir"
	KindIfb      = "ifb"
	KindCgroup   = "cgroup"
)

// Leak is something of podbay's on the host that no record owns.
type Leak struct {
	Kind string `json:"kind"`
	// ID is the sandbox or container ID it belongs to; "" when nothing
	// names one (a veth whose peer is in no pod's namespace).
	ID string `json:"id,omitempty"`
	// What identifies it: a path, an interface, a rule, a process.
	What string `json:"what"`
	// Cleanup is a suggested command; doctor never runs it.
	Cleanup string `json:"cleanup"`
	// Object is the thing itself, for a program to act on: a path (netns,
	// mount, dir, ip, cgroup), the libcni cache's files, an interface
	// (veth, ifb), a PID (process), a root filesystem's ID, or for
	// iptables "<tool> <table> <rule or chain>".
	Object string `json:"object,omitempty"`
}

// Records says where the records the leak report compares against came
// from.
type Records struct {
	// Source is "cri" (the running daemon's ListPodSandbox and
	// ListContainers) or "database" (the stopped daemon's podbay.db, read
	// only).
	Source string `json:"source"`
	// Detail names the socket or database file.
	Detail     string   `json:"detail"`
	Sandboxes  []string `json:"sandboxes"`
	Containers []string `json:"containers"`
}

// Owned is the set of IDs the records own.
func (r Records) Owned() map[string]bool {
	owned := map[string]bool{}
	for _, ids := range [][]string{r.Sandboxes, r.Containers} {
		for _, id := range ids {
			owned[id] = true
		}
	}
	return owned
}

// Report is everything doctor found.
type Report struct {
	Config string   `json:"config"`
	Checks []Result `json:"checks,omitempty"`
	// Records is nil when the leak report was not made.
	Records *Records `json:"records,omitempty"`
	// LeakError is why the leak report could not be made.
	LeakError string `json:"leakError,omitempty"`
	// ScanErrors are what could not be listed: the report may miss leaks
	// of those kinds.
	ScanErrors []string `json:"scanErrors,omitempty"`
	Leaks      []Leak   `json:"leaks"`
}

// Exit statuses of podbay doctor.
const (
	ExitOK = 0
	// ExitFailed: a check failed, or the leak report could not be made.
	ExitFailed = 1
	// ExitLeaks: every check passed (or warned), and leaks were found.
	ExitLeaks = 3
)

// ExitCode is the status podbay doctor exits with for r: a failed check
// outranks leaks.
func (r *Report) ExitCode() int {
	for _, c := range r.Checks {
		if c.Verdict == Fail {
			return ExitFailed
		}
	}
	if r.LeakError != "" {
		return ExitFailed
	}
	if len(r.Leaks) > 0 {
		return ExitLeaks
	}
	return ExitOK
}

// WriteJSON writes r as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	if r.Leaks == nil {
		r.Leaks = []Leak{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for a terminal: the checks, one line each with the
// fix below, then the leaks with their cleanup commands.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "podbay doctor, config %s\n", r.Config)
	if len(r.Checks) > 0 {
		b.WriteString("\nHost checks\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		counts := map[Verdict]int{}
		for _, c := range r.Checks {
			counts[c.Verdict]++
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Verdict, c.Check, c.Reason)
			if c.Fix != "" {
				fmt.Fprintf(tw, "  \t\tfix: %s\n", c.Fix)
			}
		}
		tw.Flush()
		fmt.Fprintf(&b, "  %d OK, %d WARN, %d FAIL\n", counts[OK], counts[Warn], counts[Fail])
	}
	switch {
	case r.LeakError != "":
		fmt.Fprintf(&b, "\nLeak report: not made: %s\n", r.LeakError)
	case r.Records != nil:
		fmt.Fprintf(&b, "\nLeak report (records from %s, %s: %d sandboxes, %d containers)\n",
			r.Records.Source, r.Records.Detail, len(r.Records.Sandboxes), len(r.Records.Containers))
		if len(r.Leaks) == 0 {
			b.WriteString("  nothing of podbay's is left that no record owns\n")
		}
		for _, l := range r.Leaks {
			id := l.ID
			if id == "" {
				id = "-"
			}
			fmt.Fprintf(&b, "  %-9s %s  %s\n", l.Kind, shortID(id), l.What)
			fmt.Fprintf(&b, "  %-9s cleanup: %s\n", "", l.Cleanup)
		}
		if len(r.Leaks) > 0 {
			fmt.Fprintf(&b, "  %d leaks\n", len(r.Leaks))
		}
		for _, e := range r.ScanErrors {
			fmt.Fprintf(&b, "  not listed, leaks of this kind may be missing: %s\n", e)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}
