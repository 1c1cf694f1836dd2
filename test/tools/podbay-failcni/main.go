// Command podbay-failcni is a CNI plugin for podbay's integration tests. It is
// chained last in a conflist and fails a verb on demand, after the plugins
// before it have done their work, so that the runtime has to clean up a
// half-done ADD.
//
// Its network configuration names a control directory:
//
//	{"type": "podbay-failcni", "controlDir": "/tmp/pb123/cnictl"}
//
// When <controlDir>/fail-ADD (or fail-DEL, fail-CHECK, …) exists the verb
// fails with CNI error code 100. An empty file fails every call until it is
// removed; a file holding a number N fails the next N calls (see
// test/internal/failctl). <controlDir>/hang-ADD (and so on, same rules)
// makes the verb record "hang" and then sleep until it is killed, as a
// plugin stuck on a lock or an unanswering IPAM server would. Otherwise ADD passes prevResult through, converted
// to the configuration's version, and DEL, CHECK, GC and STATUS succeed.
//
// Every call is appended to <controlDir>/calls.log as
// "VERB containerID ifname netns result", which lets tests check that a
// failed ADD was followed by a DEL. The runtimeConfig an ADD got (the
// capabilities the configuration declares and the runtime passed) is written
// to <controlDir>/runtimeConfig/<containerID>.json, which lets tests check
// what reached the plugins.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/podbay/podbay/test/internal/failctl"
)

// errInjected is the CNI error code of an injected failure; codes 100 and up
// are plugin-specific.
const errInjected = 100

type netConf struct {
	types.NetConf
	ControlDir    string          `json:"controlDir"`
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
}

var supported = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	cmd := os.Getenv("CNI_COMMAND")
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("", types.ErrIOFailure, "read stdin", err.Error())
	}
	if cmd == "VERSION" {
		if err := supported.Encode(os.Stdout); err != nil {
			fail("", types.ErrIOFailure, "write version", err.Error())
		}
		return
	}

	var conf netConf
	if err := json.Unmarshal(stdin, &conf); err != nil {
		fail("", types.ErrDecodingFailure, "decode network configuration", err.Error())
	}
	if conf.ControlDir == "" {
		fail(conf.CNIVersion, types.ErrInvalidNetworkConfig, "controlDir is required", "")
	}

	switch cmd {
	case "ADD", "DEL", "CHECK", "GC", "STATUS":
	default:
		fail(conf.CNIVersion, types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI_COMMAND %q", cmd), "")
	}

	failNow, err := failctl.Consume(filepath.Join(conf.ControlDir, "fail-"+cmd))
	if err != nil {
		record(conf.ControlDir, cmd, "control-error")
		fail(conf.CNIVersion, types.ErrInternal, "read control file", err.Error())
	}
	if failNow {
		record(conf.ControlDir, cmd, "injected-failure")
		fail(conf.CNIVersion, errInjected, fmt.Sprintf("podbay-failcni: injected %s failure", cmd), "")
	}
	hangNow, err := failctl.Consume(filepath.Join(conf.ControlDir, "hang-"+cmd))
	if err != nil {
		record(conf.ControlDir, cmd, "control-error")
		fail(conf.CNIVersion, types.ErrInternal, "read control file", err.Error())
	}
	if hangNow {
		record(conf.ControlDir, cmd, "hang")
		for {
			time.Sleep(time.Hour)
		}
	}

	if cmd == "ADD" {
		if err := recordRuntimeConfig(&conf); err != nil {
			record(conf.ControlDir, cmd, "error")
			fail(conf.CNIVersion, types.ErrIOFailure, "record runtimeConfig", err.Error())
		}
		if err := passThrough(&conf); err != nil {
			record(conf.ControlDir, cmd, "error")
			fail(conf.CNIVersion, types.ErrDecodingFailure, "pass prevResult through", err.Error())
		}
	}
	record(conf.ControlDir, cmd, "ok")
}

// passThrough prints prevResult in the configuration's version, or an empty
// result when the plugin is not chained.
func passThrough(conf *netConf) error {
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return err
	}
	result := conf.PrevResult
	if result == nil {
		var err error
		result, err = version.NewResult(conf.CNIVersion, []byte(fmt.Sprintf(`{"cniVersion":%q}`, conf.CNIVersion)))
		if err != nil {
			return err
		}
	}
	return types.PrintResult(result, conf.CNIVersion)
}

// recordRuntimeConfig writes the ADD's runtimeConfig ("{}" when it has
// none) to <controlDir>/runtimeConfig/<containerID>.json.
func recordRuntimeConfig(conf *netConf) error {
	dir := filepath.Join(conf.ControlDir, "runtimeConfig")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data := []byte(conf.RuntimeConfig)
	if len(data) == 0 {
		data = []byte("{}")
	}
	return os.WriteFile(filepath.Join(dir, os.Getenv("CNI_CONTAINERID")+".json"), data, 0o644)
}

func record(dir, cmd, outcome string) {
	f, err := os.OpenFile(filepath.Join(dir, "calls.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fields := []string{cmd, orDash(os.Getenv("CNI_CONTAINERID")), orDash(os.Getenv("CNI_IFNAME")), orDash(os.Getenv("CNI_NETNS")), outcome}
	// One write of a short line: O_APPEND keeps concurrent callers' lines whole.
	f.Write([]byte(strings.Join(fields, " ") + "\n")) //nolint:errcheck // best-effort trace
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fail(cniVersion string, code uint, msg, details string) {
	if cniVersion == "" {
		cniVersion = "1.0.0"
	}
	out := struct {
		CNIVersion string `json:"cniVersion"`
		*types.Error
	}{cniVersion, types.NewError(code, msg, details)}
	json.NewEncoder(os.Stdout).Encode(out) //nolint:errcheck // nothing left to report to
	os.Exit(1)
}
