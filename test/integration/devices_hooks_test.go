package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// injectDirs makes a directory for a test's CDI specs or OCI hooks, beside
// the env (whose own dir is made by newEnv, after the config text is
// fixed); removed after the env's cleanup.
func injectDirs(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pbinj")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func writeTestFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func ctrAnnotation(k, v string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) { c.Annotations[k] = v }
}

func ctrCDIDevices(names ...string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		for _, n := range names {
			c.CDIDevices = append(c.CDIDevices, &runtimeapi.CDIDevice{Name: n})
		}
	}
}

// TestCDIDevices: devices asked for by the CRI field and by a cdi.k8s.io/
// annotation are injected from the env's spec files (a device node, an
// environment variable, a mount); an unknown or malformed device is
// refused with its gRPC code and leaves nothing; a spec written after the
// daemon started, in a directory that did not exist then, is used at once.
func TestCDIDevices(t *testing.T) {
	dir := injectDirs(t)
	static, dynamic := filepath.Join(dir, "cdi"), filepath.Join(dir, "cdi-run")
	data := filepath.Join(dir, "data")
	writeTestFile(t, filepath.Join(data, "hello"), "from the CDI mount\n", 0o644)
	writeTestFile(t, filepath.Join(static, "podbay-test.yaml"), fmt.Sprintf(`cdiVersion: "0.6.0"
kind: podbay.test/dev
containerEdits:
  env: ["PB_CDI_VENDOR=1"]
devices:
- name: "null"
  containerEdits:
    deviceNodes:
    - path: /dev/pbnull
      hostPath: /dev/null
    env: ["PB_CDI=null"]
    mounts:
    - hostPath: %s
      containerPath: /pb-data
      options: [ro, bind]
`, data), 0o644)
	// A broken spec next to it is logged and leaves the others usable.
	writeTestFile(t, filepath.Join(static, "broken.json"), `{"cdiVersion": "0.6.0", "kind": `, 0o644)

	e, images := newContainerEnvWith(t, envOptions{
		topConfig: fmt.Sprintf("cdi_spec_dirs = [%q, %q]\nhooks_dir = []", static, dynamic),
	}, "busybox")
	pod := e.runTestPod(t, "cdi")
	busybox := images.ref("busybox")

	check := func(t *testing.T, id string) {
		t.Helper()
		out := e.execOutput(t, id, "sh", "-c", `stat -c '%F %t:%T' /dev/pbnull; echo "$PB_CDI $PB_CDI_VENDOR"; cat /pb-data/hello; echo x > /dev/pbnull && echo writable; touch /pb-data/x 2>/dev/null || echo read-only`)
		want := "character special file 1:3\nnull 1\nfrom the CDI mount\nwritable\nread-only\n"
		if out != want {
			t.Errorf("in the container: %q, want %q", out, want)
		}
	}
	t.Run("field", func(t *testing.T) {
		id, _ := e.runContainer(t, pod, containerConfig("cdi-field", busybox, ctrCommand("sleep", "1000"),
			ctrCDIDevices("podbay.test/dev=null")))
		defer e.removeContainer(t, id)
		check(t, id)
	})
	t.Run("annotation", func(t *testing.T) {
		// A key of the form cdi.AnnotationKey makes: <plugin>_<id>.
		id, _ := e.runContainer(t, pod, containerConfig("cdi-annotation", busybox, ctrCommand("sleep", "1000"),
			ctrAnnotation("cdi.k8s.io/devicemanager_podbay.test", "podbay.test/dev=null")))
		defer e.removeContainer(t, id)
		check(t, id)
	})

	for _, tc := range []struct {
		name string
		mod  ctrMod
		code codes.Code
		msg  string
	}{
		{"unknown", ctrCDIDevices("podbay.test/dev=null", "podbay.test/dev=nope"), codes.NotFound, `"podbay.test/dev=nope"`},
		{"unknown-annotated", ctrAnnotation("cdi.k8s.io/x", "podbay.test/other=a"), codes.NotFound, `"podbay.test/other=a"`},
		{"malformed", ctrCDIDevices("gpu0"), codes.InvalidArgument, `"gpu0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.tryCreateContainer(rpcCtx(t), pod, containerConfig("cdi-"+tc.name, busybox, tc.mod))
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("CreateContainer: %v; want %v naming %s", err, tc.code, tc.msg)
			}
		})
	}
	requireLogged(t, e, "CDI spec file not usable", "broken.json")
	if cs := e.listContainers(t, nil); len(cs) != 0 {
		t.Fatalf("containers left by refused creates: %v", containerIDs(cs))
	}
	// The removed containers' directories go in RemoveContainer's
	// background release; a refused create's would stay.
	if err := eventually(30*time.Second, func() error {
		if entries, _ := os.ReadDir(filepath.Join(e.rootDir, "containers")); len(entries) != 0 {
			return fmt.Errorf("%d container dirs left by refused creates", len(entries))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("added-after-start", func(t *testing.T) {
		// The later directory appears now and takes precedence for "null".
		writeTestFile(t, filepath.Join(dynamic, "late.json"),
			`{"cdiVersion":"0.6.0","kind":"podbay.test/dev","devices":[{"name":"null","containerEdits":{"env":["PB_CDI=late"]}}]}`, 0o644)
		id, _ := e.runContainer(t, pod, containerConfig("cdi-late", busybox, ctrCommand("sleep", "1000"),
			ctrCDIDevices("podbay.test/dev=null")))
		defer e.removeContainer(t, id)
		if out := e.execOutput(t, id, "sh", "-c", `echo "$PB_CDI"; test -e /dev/pbnull || echo no-node`); out != "late\nno-node\n" {
			t.Errorf("device of the later directory: %q", out)
		}
	})
	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)
	e.assertNoLeaks(t)
}

// hookState is the container state an OCI hook reads on its stdin.
type hookState struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations"`
}

// hookRuns reads the states the test hook wrote into dir, by container ID.
func hookRuns(t *testing.T, dir string) map[string][]string {
	t.Helper()
	runs := map[string][]string{}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, ent := range entries {
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var st hookState
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("hook output %s: %v: %q", ent.Name(), err, data)
		}
		runs[st.ID] = append(runs[st.ID], st.Status)
	}
	for _, s := range runs {
		slices.Sort(s)
	}
	return runs
}

// TestOCIHooks: hooks of the env's hooks_dir are run by the OCI runtime
// for the containers their conditions match (an annotation; always), at
// their stages (createRuntime, written as prestart; poststop), not for the
// pod's sandbox container; a hook file added while the daemon runs is
// used by the next container, an invalid one is skipped.
func TestOCIHooks(t *testing.T) {
	dir := injectDirs(t)
	hooksDir, out := filepath.Join(dir, "hooks.d"), filepath.Join(dir, "out")
	script := filepath.Join(dir, "hook.sh")
	// The state arrives on stdin; $1 is where to keep it.
	writeTestFile(t, script, "#!/bin/sh\nmkdir -p \"$1\"\ncat > \"$(mktemp \"$1/state.XXXXXX\")\"\n", 0o755)
	hook := func(outName, when string, stages ...string) string {
		st, _ := json.Marshal(stages)
		return fmt.Sprintf(`{"version":"1.0.0","hook":{"path":%q,"args":["hook.sh",%q],"env":["PATH=/usr/bin:/bin"],"timeout":10},"when":%s,"stages":%s}`,
			script, filepath.Join(out, outName), when, st)
	}
	writeTestFile(t, filepath.Join(hooksDir, "10-annotated.json"), hook("annotated", `{"annotations":{"^podbay\\.test/hook$":"^yes$"}}`, "prestart", "poststop"), 0o644)
	writeTestFile(t, filepath.Join(hooksDir, "20-always.json"), hook("always", `{"always":true}`, "createRuntime"), 0o644)
	writeTestFile(t, filepath.Join(hooksDir, "30-invalid.json"), `{"version":"1.0.0","hook":{"path":"/nonexistent/hook"},"when":{"always":true},"stages":["prestart"]}`, 0o644)

	e, images := newContainerEnvWith(t, envOptions{
		topConfig: fmt.Sprintf("hooks_dir = [%q]\ncdi_spec_dirs = []", hooksDir),
	}, "busybox")
	pod := e.runTestPod(t, "hooks")
	busybox := images.ref("busybox")

	requireLogged(t, e, "invalid OCI hook file skipped", "30-invalid.json")
	with, _ := e.runContainer(t, pod, containerConfig("with", busybox, ctrCommand("sleep", "1000"), ctrAnnotation("podbay.test/hook", "yes")))
	without, _ := e.runContainer(t, pod, containerConfig("without", busybox, ctrCommand("sleep", "1000"), ctrAnnotation("podbay.test/hook", "no")))
	if got := hookRuns(t, filepath.Join(out, "annotated")); !slices.Equal(sortedKeys(got), []string{with}) || !slices.Equal(got[with], []string{"creating"}) {
		t.Fatalf("annotated hook ran for %v, want %s once, at createRuntime (creating)", got, short(with))
	}
	if got := hookRuns(t, filepath.Join(out, "always")); !slices.Equal(sortedKeys(got), sortStrings(with, without)) {
		t.Fatalf("always hook ran for %v, want the two containers (not the sandbox %s)", sortedKeys(got), short(pod.id))
	}

	for _, id := range []string{with, without} {
		e.stopContainer(t, id, 1)
		e.removeContainer(t, id)
	}
	if got := hookRuns(t, filepath.Join(out, "annotated")); !slices.Equal(got[with], []string{"creating", "stopped"}) || len(got) != 1 {
		t.Fatalf("annotated hook after remove: %v, want createRuntime and poststop (stopped) of %s", got, short(with))
	}

	// Added while the daemon runs: the next container has it.
	writeTestFile(t, filepath.Join(hooksDir, "40-late.json"), hook("late", `{"commands":["^sleep$"]}`, "createRuntime"), 0o644)
	late, _ := e.runContainer(t, pod, containerConfig("late", busybox, ctrCommand("sleep", "1000")))
	if got := hookRuns(t, filepath.Join(out, "late")); !slices.Equal(sortedKeys(got), []string{late}) {
		t.Fatalf("hook added after start ran for %v, want %s", sortedKeys(got), short(late))
	}
	e.stopContainer(t, late, 1)
	e.removeContainer(t, late)
	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)
	e.assertNoLeaks(t)
}

func sortStrings(s ...string) []string {
	slices.Sort(s)
	return s
}

// requireLogged fails the test unless a line of the daemon's log has all
// of parts.
func requireLogged(t *testing.T, e *env, parts ...string) {
	t.Helper()
	data, err := os.ReadFile(e.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return
		}
	}
	t.Errorf("the daemon's log has no line with %q", parts)
}
