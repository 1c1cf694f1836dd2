package doctor

import (
	"context"
	"time"

	"github.com/podbay/podbay/internal/config"
)

// Options configure Run.
type Options struct {
	// ConfigPath is the config file; Config is what loading it gave (nil
	// with ConfigErr set when it did not load).
	ConfigPath string
	Config     *config.Config
	ConfigErr  error
	// Checks and Leaks choose the parts of the report.
	Checks, Leaks bool
	// Probe is the host the checks read (Host{} for this machine).
	Probe Probe
	// Timeout bounds the daemon's answers and the wait for its database.
	Timeout time.Duration
	// Owns and CgroupRoot widen the leak report's scope to a run that
	// keeps everything in its own directories and cgroup parent (hack/'s
	// scripts): see Scope.
	Owns       []string
	CgroupRoot string
	// NoRecords reports everything of podbay's found, owned or not: for a
	// run whose pods must all be gone (hack/'s scripts, once their daemon
	// stopped).
	NoRecords bool
}

// Run checks the host and makes the leak report. It changes nothing.
func Run(ctx context.Context, o Options) *Report {
	r := &Report{Config: o.ConfigPath, Leaks: []Leak{}}
	cfgResult := CheckConfig(o.ConfigPath, o.Config, o.ConfigErr)
	if o.Checks {
		r.Checks = append(r.Checks, cfgResult)
	}
	if o.ConfigErr != nil {
		if o.Leaks {
			r.LeakError = "the config does not load: without it doctor does not know podbay's directories"
		}
		return r
	}
	cfg := o.Config
	daemonPID := DaemonPID(cfg.Listen, o.Timeout)
	n, cniResult := ResolveNetwork(o.Probe, cfg)
	if o.Checks {
		r.Checks = append(r.Checks, HostChecks(o.Probe, CheckOptions{Config: cfg, DaemonPID: daemonPID, CNI: cniResult})...)
	}
	if !o.Leaks {
		return r
	}
	// The host first, the records after, as podbayd's garbage collection
	// does: a pod made meanwhile has its record by then.
	scope := ScopeOf(cfg, n, daemonPID)
	scope.Owns, scope.CgroupRoot = o.Owns, o.CgroupRoot
	inv, errs := ScanScope(ctx, scope)
	for _, err := range errs {
		r.ScanErrors = append(r.ScanErrors, err.Error())
	}
	if o.NoRecords {
		r.Records = &Records{Source: SourceNone, Detail: "--no-records", Sandboxes: []string{}, Containers: []string{}}
		r.Leaks = Classify(inv, map[string]bool{})
		return r
	}
	recs, err := LoadRecords(ctx, cfg, daemonPID, o.Timeout)
	if err != nil {
		r.LeakError = err.Error()
		return r
	}
	owned := recs.Owned()
	r.Leaks = Classify(inv, owned)
	if len(r.Leaks) > 0 && recs.Source == SourceCRI {
		// A pod the daemon was making while the host was listed is
		// published only once complete: ask again a little later and
		// take what it owns by then.
		time.Sleep(settleDelay)
		if again, err := LoadRecords(ctx, cfg, daemonPID, o.Timeout); err == nil {
			recs.Sandboxes, recs.Containers = again.Sandboxes, again.Containers
			for id := range again.Owned() {
				owned[id] = true
			}
			r.Leaks = Classify(inv, owned)
		}
	}
	r.Records = recs
	return r
}

// settleDelay is how long Run waits before asking a running daemon again
// about the leaks it found.
const settleDelay = time.Second
