package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

func TestExecArgs(t *testing.T) {
	cfg := Config{RuntimePath: "/usr/sbin/runc", RuntimeRoot: "/run/podbay/runc"}
	files := execFilesIn("/b/c1/.exec-1")
	want := []string{
		"--root", "/run/podbay/runc",
		"--log", "/b/c1/.exec-1/runtime.log", "--log-format", "json",
		"exec",
		"--process", "/b/c1/.exec-1/process.json",
		"--pid-file", "/b/c1/.exec-1/pid",
		"c1",
	}
	if got := execArgs(cfg, "c1", files); !slices.Equal(got, want) {
		t.Errorf("execArgs =\n%q\nwant\n%q", got, want)
	}
}

func TestParseRuntimeLog(t *testing.T) {
	for _, tc := range []struct{ log, want string }{
		{log: "", want: ""},
		{log: `{"level":"warning","msg":"cgroup v1 is deprecated","time":"2026-11-22T09:12:21Z"}` + "\n", want: ""},
		{
			log:  `{"level":"error","msg":"exec failed: unable to start container process: exec: \"nonexist\": executable file not found in $PATH","time":"2026-11-22T09:12:21Z"}`,
			want: `exec failed: unable to start container process: exec: "nonexist": executable file not found in $PATH`,
		},
		{log: "not json\n" + `{"level":"error","msg":"a"}` + "\n" + `{"level":"fatal","msg":"b"}` + "\n", want: "a; b"},
	} {
		if got := parseRuntimeLog(strings.NewReader(tc.log)); got != tc.want {
			t.Errorf("parseRuntimeLog(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	if code, err := exitCode(nil); code != 0 || err != nil {
		t.Errorf("exitCode(nil) = %d, %v", code, err)
	}
	if _, err := exitCode(errors.New("boom")); err == nil {
		t.Error("exitCode of a non-exit error returned no error")
	}
	for script, want := range map[string]int32{"exit 3": 3, "exit 255": 255, "kill -9 $$": 137, "kill -15 $$": 143} {
		err := exec.Command("/bin/sh", "-c", script).Run()
		if code, cerr := exitCode(err); code != want || cerr != nil {
			t.Errorf("exitCode after %q = %d, %v; want %d", script, code, cerr, want)
		}
	}
}

// fakeExecRuntime returns a Runtime whose runtime is a script: `state`
// reports container c1 running from a bundle with a config.json, and
// `exec` runs execBody with $proc, $pidfile and $log set. The bundle is
// returned too.
func fakeExecRuntime(t *testing.T, status, execBody string) (*Runtime, string) {
	t.Helper()
	r := newFakeRuntime(t, nil)
	bundle := filepath.Join(t.TempDir(), "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := specs.Spec{Process: &specs.Process{Args: []string{"sleep"}, Env: []string{"PATH=/bin"}, Cwd: "/"}}
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	--root|--log-format) shift 2 ;;
	--log) log=$2; shift 2 ;;
	*) break ;;
	esac
done
op=$1; shift
case "$op" in
state) printf '{"id":"%s","pid":1,"status":"` + status + `","bundle":"` + bundle + `"}' "$1"; exit 0 ;;
exec)
	while [ $# -gt 1 ]; do
		case "$1" in
		--process) proc=$2; shift 2 ;;
		--pid-file) pidfile=$2; shift 2 ;;
		*) shift ;;
		esac
	done
` + execBody + `
	;;
esac
exit 1
`
	if err := os.WriteFile(r.cfg.RuntimePath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return r, bundle
}

// TestExecSyncFakeRuntime drives ExecSync through a fake runtime: what it
// is given, how its exit and its failures come back, without root.
func TestExecSyncFakeRuntime(t *testing.T) {
	ctx := context.Background()
	t.Run("result", func(t *testing.T) {
		r, bundle := fakeExecRuntime(t, "running", `
	cp "$proc" "$(dirname "$proc")/../seen.json"
	echo $$ > "$pidfile"
	echo out; echo err >&2; exit 7`)
		res, err := r.ExecSync(ctx, "c1", runtime.ExecOptions{Args: []string{"probe", "--ready"}, Env: []string{"X=1"}})
		if err != nil {
			t.Fatalf("ExecSync: %v", err)
		}
		if want := (runtime.ExecResult{Stdout: []byte("out\n"), Stderr: []byte("err\n"), ExitCode: 7}); !reflect.DeepEqual(res, want) {
			t.Errorf("ExecSync = %+v, want %+v", res, want)
		}
		data, err := os.ReadFile(filepath.Join(bundle, "seen.json"))
		if err != nil {
			t.Fatal(err)
		}
		var p specs.Process
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Args, []string{"probe", "--ready"}) || !slices.Equal(p.Env, []string{"PATH=/bin", "X=1"}) || p.Terminal {
			t.Errorf("process given to the runtime: %+v", p)
		}
		if left, _ := filepath.Glob(filepath.Join(bundle, ".exec-*")); len(left) > 0 {
			t.Errorf("exec directories left: %q", left)
		}
	})
	t.Run("runtime failure", func(t *testing.T) {
		r, _ := fakeExecRuntime(t, "running", `
	echo '{"level":"error","msg":"exec failed: boom","time":"2026-11-22T09:12:21Z"}' > "$log"
	echo 'exec failed: boom' >&2; exit 255`)
		_, err := r.ExecSync(ctx, "c1", runtime.ExecOptions{Args: []string{"x"}})
		if err == nil || !strings.Contains(err.Error(), "exec failed: boom") || strings.Count(err.Error(), "boom") != 1 {
			t.Fatalf("ExecSync = %v, want the runtime's message once", err)
		}
		if errors.Is(err, errdefs.ErrFailedPrecondition) || errdefs.IsNotFound(err) {
			t.Errorf("error %v misclassified", err)
		}
	})
	t.Run("exit 255 is the process's", func(t *testing.T) {
		r, _ := fakeExecRuntime(t, "running", `echo $$ > "$pidfile"; exit 255`)
		if res, err := r.ExecSync(ctx, "c1", runtime.ExecOptions{Args: []string{"x"}}); err != nil || res.ExitCode != 255 {
			t.Errorf("ExecSync = %+v, %v; want exit code 255", res, err)
		}
	})
	for _, status := range []string{"created", "paused", "stopped"} {
		t.Run(status, func(t *testing.T) {
			r, _ := fakeExecRuntime(t, status, `exit 0`)
			if _, err := r.ExecSync(ctx, "c1", runtime.ExecOptions{Args: []string{"x"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("ExecSync in a %s container = %v, want ErrFailedPrecondition", status, err)
			}
		})
	}
	t.Run("timeout before the pid file", func(t *testing.T) {
		// A runtime that never starts the process is killed itself.
		r, _ := fakeExecRuntime(t, "running", `exec sleep 60`)
		start := time.Now()
		res, err := r.ExecSync(ctx, "c1", runtime.ExecOptions{Args: []string{"x"}, Timeout: 100 * time.Millisecond})
		if err != nil || !res.TimedOut || res.ExitCode != -1 {
			t.Fatalf("ExecSync = %+v, %v", res, err)
		}
		if d := time.Since(start); d > execKillGrace+2*time.Second {
			t.Errorf("took %v", d)
		}
	})
}
