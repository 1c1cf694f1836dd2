package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// suiteOCIRuntime is the OCI runtime the env's failure-injecting wrapper
// runs for the suite's handlers (oci: conmon's runtime; vm: the shim's):
// PODBAY_TEST_OCI_RUNTIME, a binary name looked up in PATH or a path; ""
// leaves the wrapper's default, the host's runc. make test-node runs the
// suite with crun so.
var suiteOCIRuntime = func() string {
	name := strings.TrimSpace(os.Getenv("PODBAY_TEST_OCI_RUNTIME"))
	if name == "" {
		return ""
	}
	p, err := exec.LookPath(name)
	if err != nil {
		// Reported by every env (setSuiteOCIRuntime): a suite asked to
		// run crun must not quietly run runc.
		return name
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p
}()

// setSuiteOCIRuntime points the env's runtime wrapper at suiteOCIRuntime.
func (e *env) setSuiteOCIRuntime(t *testing.T) {
	t.Helper()
	if suiteOCIRuntime == "" {
		return
	}
	if _, err := os.Stat(suiteOCIRuntime); err != nil {
		t.Fatalf("PODBAY_TEST_OCI_RUNTIME=%s: %v", os.Getenv("PODBAY_TEST_OCI_RUNTIME"), err)
	}
	if err := os.WriteFile(e.runtimePath+".real", []byte(suiteOCIRuntime+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
