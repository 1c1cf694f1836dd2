package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/doctor"
)

const doctorUsage = `usage: podbay doctor [--config PATH] [--json] [--only checks|leaks] [--timeout D]
                     [podbayd's overrides: --listen --root --state --metrics-address
                      --stream-address --stream-port --cni-conf-dir --cni-plugin-dirs]
                     [a run's own scope: --own-dir DIR[,DIR] --cgroup-root PATH --no-records]

Checks the host for what podbayd needs, then lists what of podbay's is left
on the host that no record owns (asking the running podbayd over the CRI, or
reading a stopped one's database). Reads only; changes nothing.

exit status: 0 all well (warnings allowed), 1 a check failed or the leak
report could not be made, 3 leaks found (and no check failed)
`

// exitStatus ends podbay with a status and no further message.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func runDoctor(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, doctorUsage) }
	cfgPath := fs.String("config", config.DefaultPath, "podbayd's configuration file")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	only := fs.String("only", "", "checks: only the host checks; leaks: only the leak report")
	timeout := fs.Duration("timeout", 3*time.Second, "bound on the daemon's answers and the wait for its database")
	// The flags of podbayd that override what doctor looks at: give them
	// as podbayd is started.
	overrides := map[string]*string{}
	for _, name := range []string{"listen", "root", "state", "metrics-address", "stream-address", "cni-conf-dir", "cni-plugin-dirs"} {
		overrides[name] = fs.String(name, "", "as podbayd's --"+name)
	}
	streamPort := fs.Int("stream-port", -1, "as podbayd's --stream-port")
	// A test run that keeps everything of its daemon in its own
	// directories and cgroup parent can say so: then a mount or process
	// there, or a process or cgroup under that parent, is podbay's even
	// when it names no ID.
	ownDirs := fs.String("own-dir", "", "comma-separated directories wholly podbay's (a test run's temp dir)")
	noRecords := fs.Bool("no-records", false, "report everything of podbay's found, as if no record owned it (a run whose pods must all be gone)")
	cgroupRoot := fs.String("cgroup-root", "", "the run's pod cgroup parent as a cgroupfs path: its cgroups and processes are podbay's")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("doctor: unexpected arguments %q", fs.Args())
	}
	if *only != "" && *only != "checks" && *only != "leaks" {
		return fmt.Errorf("doctor: --only %q: want checks or leaks", *only)
	}
	// podbayd's own loader: the default path may be missing, a path named
	// explicitly must exist; then the same validation.
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	cfg, err := config.Load(*cfgPath, !explicit)
	if err == nil {
		for flag, dst := range map[string]*string{
			"listen": &cfg.Listen, "root": &cfg.Root, "state": &cfg.State, "metrics-address": &cfg.MetricsAddress,
			"stream-address": &cfg.StreamAddress, "cni-conf-dir": &cfg.Network.ConfDir,
		} {
			if v := *overrides[flag]; v != "" {
				*dst = v
			}
		}
		if v := *overrides["cni-plugin-dirs"]; v != "" {
			cfg.Network.PluginDirs = strings.Split(v, ",")
		}
		if *streamPort >= 0 {
			cfg.StreamPort = *streamPort
		}
		err = cfg.Validate()
	}
	if err != nil {
		cfg = nil
	}
	report := doctor.Run(context.Background(), doctor.Options{
		ConfigPath: *cfgPath,
		Config:     cfg,
		ConfigErr:  err,
		Checks:     *only != "leaks",
		Leaks:      *only != "checks",
		Probe:      doctor.Host{},
		Timeout:    *timeout,
		Owns:       splitList(*ownDirs),
		CgroupRoot: *cgroupRoot,
		NoRecords:  *noRecords,
	})
	if *asJSON {
		err = report.WriteJSON(out)
	} else {
		err = report.WriteText(out)
	}
	if err != nil {
		return err
	}
	if code := report.ExitCode(); code != doctor.ExitOK {
		return exitStatus(code)
	}
	return nil
}

// splitList splits a comma-separated flag value, "" giving none.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
