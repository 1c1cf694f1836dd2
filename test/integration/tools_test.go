package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/test/internal/nsinfo"
)

// failCNI makes podbay-failcni fail verb (ADD, DEL, CHECK) until
// clearFailures.
func (e *env) failCNI(verb string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.cniCtlDir, "fail-"+verb), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// failCNICount makes podbay-failcni fail verb the next n times.
func (e *env) failCNICount(verb string, n int) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.cniCtlDir, "fail-"+verb), []byte(strconv.Itoa(n)), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// failRuntime makes the runtime wrapper fail subcommand verb (create,
// start, delete, …) until clearFailures.
func (e *env) failRuntime(verb string) {
	e.t.Helper()
	if err := os.WriteFile(e.runtimePath+".fail-"+verb, nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// clearFailures removes every control file of both tools, hangs included.
func (e *env) clearFailures() {
	e.t.Helper()
	for _, pattern := range []string{filepath.Join(e.cniCtlDir, "fail-*"), e.runtimePath + ".fail-*",
		filepath.Join(e.cniCtlDir, "hang-*"), e.runtimePath + ".hang-*"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if strings.HasSuffix(m, ".lock") {
				continue
			}
			if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
				e.t.Fatal(err)
			}
		}
	}
}

// cniCall is one line of podbay-failcni's calls.log.
type cniCall struct{ Verb, ContainerID, IfName, NetNS, Outcome string }

func (e *env) cniCalls() []cniCall {
	f, err := os.Open(filepath.Join(e.cniCtlDir, "calls.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var calls []cniCall
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 5 {
			calls = append(calls, cniCall{fs[0], fs[1], fs[2], fs[3], fs[4]})
		}
	}
	return calls
}

// noteIDs remembers sandbox IDs so that the leak checker can recognise
// their iptables rules.
func (e *env) noteIDs(ids ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if id != "" {
			e.seenIDs[id] = true
		}
	}
}

// knownIDs returns every sandbox ID the env has seen: returned by the
// daemon, passed to CNI, or passed to the runtime.
func (e *env) knownIDs() map[string]bool {
	ids := map[string]bool{}
	e.mu.Lock()
	for id := range e.seenIDs {
		ids[id] = true
	}
	e.mu.Unlock()
	for _, c := range e.cniCalls() {
		if c.ContainerID != "-" {
			ids[c.ContainerID] = true
		}
	}
	for _, r := range e.createRecords() {
		if r.ContainerID != "" {
			ids[r.ContainerID] = true
		}
		if id := r.Annotations["io.kubernetes.cri.sandbox-id"]; id != "" {
			ids[id] = true
		}
	}
	return ids
}

// createRecord is what podbay-failruntime wrote when asked to create a
// container.
type createRecord struct {
	ContainerID string              `json:"containerID"`
	Bundle      string              `json:"bundle"`
	Time        time.Time           `json:"time"`
	OCIVersion  string              `json:"ociVersion"`
	NetNSPath   string              `json:"netnsPath"`
	Annotations map[string]string   `json:"annotations"`
	Interfaces  []nsinfo.Interface  `json:"interfaces"`
	Error       string              `json:"error"`
	Namespaces  []map[string]string `json:"namespaces"`
}

func (e *env) createRecords() []createRecord {
	files, _ := filepath.Glob(filepath.Join(e.runtimePath+".record", "*.create.json"))
	var recs []createRecord
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var r createRecord
		if json.Unmarshal(data, &r) == nil {
			recs = append(recs, r)
		}
	}
	return recs
}

// sandboxCreateRecord finds the runtime wrapper's record of the create of
// sandbox id's sandbox container.
func (e *env) sandboxCreateRecord(t *testing.T, id string) createRecord {
	t.Helper()
	var found []createRecord
	for _, r := range e.createRecords() {
		if r.ContainerID == id || r.Annotations["io.kubernetes.cri.sandbox-id"] == id && r.Annotations["io.kubernetes.cri.container-type"] == "sandbox" {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		t.Fatalf("the runtime wrapper recorded no create for sandbox %s", short(id))
	case 1:
	default:
		t.Logf("the runtime wrapper recorded %d creates for sandbox %s; using the last", len(found), short(id))
	}
	last := found[0]
	for _, r := range found[1:] {
		if r.Time.After(last.Time) {
			last = r
		}
	}
	return last
}

// sandboxStartRecord is the runtime wrapper's record of the start of
// sandbox id's sandbox container.
func (e *env) sandboxStartRecord(t *testing.T, id string) createRecord {
	t.Helper()
	created := e.sandboxCreateRecord(t, id)
	data, err := os.ReadFile(filepath.Join(e.runtimePath+".record", created.ContainerID+".start.json"))
	if err != nil {
		t.Fatalf("the runtime wrapper recorded no start for sandbox %s: %v", short(id), err)
	}
	var r createRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("start record of sandbox %s: %v", short(id), err)
	}
	return r
}

// findIface returns the named interface.
func findIface(ifaces []nsinfo.Interface, name string) (nsinfo.Interface, bool) {
	for _, i := range ifaces {
		if i.Name == name {
			return i, true
		}
	}
	return nsinfo.Interface{}, false
}

func hasAddr(ifc nsinfo.Interface, ip string) bool {
	for _, a := range ifc.Addrs {
		if strings.SplitN(a, "/", 2)[0] == ip {
			return true
		}
	}
	return false
}
