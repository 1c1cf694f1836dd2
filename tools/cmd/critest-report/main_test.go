package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

func spec(state types.SpecState, text, msg string) types.SpecReport {
	return types.SpecReport{
		ContainerHierarchyTexts: []string{"[k8s.io] Image Manager"},
		LeafNodeText:            text,
		LeafNodeType:            types.NodeTypeIt,
		State:                   state,
		Failure:                 types.Failure{Message: msg},
	}
}

func writeReport(t *testing.T, specs ...types.SpecReport) string {
	t.Helper()
	data, err := json.Marshal([]types.Report{{SpecReports: specs}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestSpecs(t *testing.T) {
	file := writeReport(t,
		spec(types.SpecStatePassed, "a", ""),
		spec(types.SpecStatePassed, "b", ""),
		spec(types.SpecStateSkipped, "c", "skip"),
		spec(types.SpecStateFailed, "public image with digest", "not found"),
		spec(types.SpecStateTimedout, "slow one", "timed out"),
	)
	var out bytes.Buffer
	err := run([]string{"specs", "--allow", "with digest$", file}, &out)
	var fe failedError
	if !errors.As(err, &fe) || fe.n != 1 {
		t.Fatalf("err %v, want one unexpected failure", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "2 passed, 2 failed, 1 skipped" {
		t.Errorf("last line %q", last)
	}
	for _, want := range []string{"FAIL (allowed) [failed] [k8s.io] Image Manager public image with digest", "FAIL [timedout] [k8s.io] Image Manager slow one", "timed out"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := run([]string{"specs", "--allow", "digest", "--allow", "slow", file}, &out); err != nil {
		t.Errorf("all failures allowed: %v", err)
	}
	if err := run([]string{"specs", "--allow", "(", file}, &out); err == nil || errors.As(err, &fe) {
		t.Errorf("bad regexp: %v", err)
	}
}

func TestBench(t *testing.T) {
	dir := t.TempDir()
	data := `{"operationsNames": ["CreatePod", "StopPod"], "numParallel": 1, "datapoints": [
		{"operationsDurationsNs": [1000000, 5000000]},
		{"operationsDurationsNs": [3000000, 6000000]},
		{"operationsDurationsNs": [2000000, 7000000]}]}`
	if err := os.WriteFile(filepath.Join(dir, "pod_benchmark_data.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"bench", dir}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pod (3 samples, 1 in parallel):", "CreatePod        p50      2.0 ms   p95      3.0 ms   max      3.0 ms", "StopPod          p50      6.0 ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}
