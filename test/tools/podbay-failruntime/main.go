// Command podbay-failruntime wraps an OCI runtime (runc by default) for
// podbay's integration tests.
//
// It finds the runtime subcommand among its arguments, skipping runc's global
// flags (--root X, --log X, --log-format X, --systemd-cgroup, …). If the file
// <own path>.fail-<subcommand> exists (for example failruntime.fail-create)
// it writes a message to stderr, and to the runtime log named by --log, and
// exits 1 before doing anything; the file follows test/internal/failctl's
// count rules. If <own path>.hang-<subcommand> exists (same rules) it
// records the hang in <own path>.hangs (one line "subcommand pid") and
// sleeps until it is killed, as a runtime stuck in the kernel or on a lock
// would.
//
// On create it first records what the network namespace named in the
// bundle's config.json looked like at that moment, to
// <own path>.record/<container-id>.create.json, which lets tests prove that
// the pod network was (or was not) set up before the sandbox container was
// created. On start it records the same namespace (named by that create
// record) again, to <container-id>.start.json: the network must be there
// before the pod's first process runs.
//
// Then it execs the real runtime, /usr/sbin/runc or the path held in
// <own path>.real, with its own arguments unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podbay/podbay/test/internal/failctl"
	"github.com/podbay/podbay/test/internal/nsinfo"
)

const defaultRuntime = "/usr/sbin/runc"

// globalValueFlags are runc's global flags that take a value as the next
// argument.
var globalValueFlags = map[string]bool{
	"--root": true, "-root": true,
	"--log": true, "-log": true,
	"--log-format": true, "-log-format": true,
	"--criu": true, "-criu": true,
	"--rootless": true, "-rootless": true,
}

// createValueFlags are create's flags that take a value.
var createValueFlags = map[string]bool{
	"--bundle": true, "-bundle": true, "-b": true,
	"--console-socket": true, "-console-socket": true,
	"--pid-file": true, "-pid-file": true,
	"--preserve-fds": true, "-preserve-fds": true,
}

// Record is what the wrapper writes on create.
type Record struct {
	ContainerID string              `json:"containerID"`
	Bundle      string              `json:"bundle"`
	Time        time.Time           `json:"time"`
	OCIVersion  string              `json:"ociVersion"`
	NetNSPath   string              `json:"netnsPath"`
	Annotations map[string]string   `json:"annotations"`
	Interfaces  []nsinfo.Interface  `json:"interfaces"`
	Error       string              `json:"error,omitempty"`
	Namespaces  []map[string]string `json:"namespaces"`
}

type bundleConfig struct {
	OCIVersion  string            `json:"ociVersion"`
	Annotations map[string]string `json:"annotations"`
	Linux       *struct {
		Namespaces []map[string]string `json:"namespaces"`
	} `json:"linux"`
}

func main() {
	self, err := os.Executable()
	if err != nil {
		fatal("", "podbay-failruntime: find own path: %v", err)
	}
	args := os.Args[1:]
	sub, subIdx, logPath := parse(args)

	if sub != "" {
		failNow, err := failctl.Consume(self + ".fail-" + sub)
		if err != nil {
			fatal(logPath, "podbay-failruntime: control file: %v", err)
		}
		if failNow {
			fatal(logPath, "podbay-failruntime: injected %s failure", sub)
		}
		hangNow, err := failctl.Consume(self + ".hang-" + sub)
		if err != nil {
			fatal(logPath, "podbay-failruntime: control file: %v", err)
		}
		if hangNow {
			hang(self, sub)
		}
	}
	switch sub {
	case "create":
		recordCreate(self, args[subIdx+1:])
	case "start":
		recordStart(self, args[subIdx+1:])
	}

	real := defaultRuntime
	if data, err := os.ReadFile(self + ".real"); err == nil && strings.TrimSpace(string(data)) != "" {
		real = strings.TrimSpace(string(data))
	}
	argv := append([]string{real}, args...)
	if err := syscall.Exec(real, argv, os.Environ()); err != nil {
		fatal(logPath, "podbay-failruntime: exec %s: %v", real, err)
	}
}

// hang records the hang and never returns.
func hang(self, sub string) {
	if f, err := os.OpenFile(self+".hangs", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "%s %d\n", sub, os.Getpid())
		f.Close()
	}
	for {
		time.Sleep(time.Hour)
	}
}

// parse returns the subcommand, its index in args, and the --log path.
func parse(args []string) (sub string, idx int, logPath string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, i, logPath
		}
		name, value, hasValue := strings.Cut(a, "=")
		if globalValueFlags[name] {
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if name == "--log" || name == "-log" {
				logPath = value
			}
		}
	}
	return "", -1, logPath
}

// recordCreate writes the create record. Failures to inspect are recorded,
// not fatal: the runtime must still run.
func recordCreate(self string, args []string) {
	rec := Record{Time: time.Now(), Interfaces: []nsinfo.Interface{}}
	bundle := ""
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		if createValueFlags[name] {
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if name == "--bundle" || name == "-bundle" || name == "-b" {
				bundle = value
			}
		}
	}
	if len(positional) > 0 {
		rec.ContainerID = positional[len(positional)-1]
	}
	if bundle == "" {
		bundle, _ = os.Getwd()
	}
	rec.Bundle = bundle

	var errs []string
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		var cfg bundleConfig
		if err := json.Unmarshal(data, &cfg); err != nil {
			errs = append(errs, fmt.Sprintf("decode config.json: %v", err))
		}
		rec.Annotations = cfg.Annotations
		rec.OCIVersion = cfg.OCIVersion
		if cfg.Linux != nil {
			rec.Namespaces = cfg.Linux.Namespaces
			for _, ns := range cfg.Linux.Namespaces {
				if ns["type"] == "network" {
					rec.NetNSPath = ns["path"]
				}
			}
		}
	}
	if rec.NetNSPath != "" {
		ifaces, err := nsinfo.Interfaces(rec.NetNSPath)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if ifaces != nil {
			rec.Interfaces = ifaces
		}
	}
	rec.Error = strings.Join(errs, "; ")

	name := rec.ContainerID
	if name == "" {
		name = fmt.Sprintf("unknown-%d", os.Getpid())
	}
	writeRecord(self+".record", name+".create.json", rec)
}

// recordStart writes the start record of a container whose create was
// recorded: its namespace's interfaces as start begins.
func recordStart(self string, args []string) {
	var id string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			id = a
		}
	}
	if id == "" {
		return
	}
	dir := self + ".record"
	data, err := os.ReadFile(filepath.Join(dir, id+".create.json"))
	if err != nil {
		return // created by another wrapper, or not recorded
	}
	var created Record
	if json.Unmarshal(data, &created) != nil || created.NetNSPath == "" {
		return
	}
	rec := Record{ContainerID: id, Bundle: created.Bundle, Time: time.Now(), NetNSPath: created.NetNSPath,
		Annotations: created.Annotations, Namespaces: created.Namespaces, Interfaces: []nsinfo.Interface{}}
	ifaces, err := nsinfo.Interfaces(rec.NetNSPath)
	if err != nil {
		rec.Error = err.Error()
	}
	if ifaces != nil {
		rec.Interfaces = ifaces
	}
	writeRecord(dir, id+".start.json", rec)
}

// writeRecord writes rec to dir/name atomically, best effort.
func writeRecord(dir, name string, rec Record) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "podbay-failruntime: %v\n", err)
		return
	}
	out, _ := json.MarshalIndent(rec, "", "  ")
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, out, 0o644); err == nil {
		os.Rename(tmp, filepath.Join(dir, name)) //nolint:errcheck // best effort
	}
}

// fatal reports msg on stderr and, in runc's JSON format, in the runtime log
// that conmon reads for the error message; then exits 1.
func fatal(logPath, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, msg)
	if logPath != "" {
		if f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			line, _ := json.Marshal(map[string]string{"level": "error", "msg": msg, "time": time.Now().Format(time.RFC3339Nano)})
			f.Write(append(line, '\n')) //nolint:errcheck // best effort
			f.Close()
		}
	}
	os.Exit(1)
}
