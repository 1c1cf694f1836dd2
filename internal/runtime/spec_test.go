package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestExecProcess(t *testing.T) {
	rlimits := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}}
	caps := &specs.LinuxCapabilities{Bounding: []string{"CAP_KILL"}, Effective: []string{"CAP_KILL"}}
	base := func() *specs.Process {
		return &specs.Process{
			Terminal:        true,
			ConsoleSize:     &specs.Box{Height: 24, Width: 80},
			User:            specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{5}},
			Args:            []string{"/pause"},
			Env:             []string{"PATH=/bin", "FOO=container"},
			Cwd:             "/work",
			Capabilities:    caps,
			Rlimits:         rlimits,
			NoNewPrivileges: true,
			ApparmorProfile: "podbay-default",
			SelinuxLabel:    "system_u:system_r:container_t:s0:c1,c2",
		}
	}
	// want returns the process an exec with no options gets.
	want := func(args ...string) *specs.Process {
		p := base()
		p.Terminal, p.ConsoleSize, p.Args = false, nil, args
		return p
	}
	for _, tc := range []struct {
		name string
		opts ExecOptions
		want func() *specs.Process
	}{
		{name: "container settings", opts: ExecOptions{Args: []string{"ls", "-l"}}, want: func() *specs.Process { return want("ls", "-l") }},
		{
			name: "env merged",
			opts: ExecOptions{Args: []string{"env"}, Env: []string{"FOO=exec", "BAR=1", "FOO=last"}},
			want: func() *specs.Process {
				p := want("env")
				p.Env = []string{"PATH=/bin", "FOO=last", "BAR=1"}
				return p
			},
		},
		{
			name: "cwd",
			opts: ExecOptions{Args: []string{"pwd"}, Cwd: "/tmp"},
			want: func() *specs.Process { p := want("pwd"); p.Cwd = "/tmp"; return p },
		},
		{
			name: "user",
			opts: ExecOptions{Args: []string{"id"}, User: &specs.User{UID: 0, GID: 0}},
			want: func() *specs.Process { p := want("id"); p.User = specs.User{}; return p },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			got, err := ExecProcess(b, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if w := tc.want(); !reflect.DeepEqual(got, w) {
				t.Errorf("ExecProcess =\n%+v\nwant\n%+v", got, w)
			}
			if !reflect.DeepEqual(b, base()) {
				t.Errorf("container process changed: %+v", b)
			}
			// What the runtime reads: no terminal, the container's labels.
			data, _ := json.Marshal(got)
			for _, s := range []string{`"apparmorProfile":"podbay-default"`, `"noNewPrivileges":true`, `"selinuxLabel":`, `"rlimits":`} {
				if !strings.Contains(string(data), s) {
					t.Errorf("process spec %s lacks %s", data, s)
				}
			}
			if strings.Contains(string(data), `"terminal"`) || strings.Contains(string(data), `"consoleSize"`) {
				t.Errorf("process spec %s asks for a terminal", data)
			}
		})
	}

	if _, err := ExecProcess(nil, ExecOptions{Args: []string{"true"}}); err == nil {
		t.Error("ExecProcess without a container process succeeded")
	}
	if p, _ := ExecProcess(&specs.Process{}, ExecOptions{Args: []string{"true"}}); p.Cwd != "/" {
		t.Errorf("cwd without one in the spec = %q, want /", p.Cwd)
	}
}

func TestMergeSpecResources(t *testing.T) {
	for _, tc := range []struct {
		name, doc, patch, want string
		bad                    bool
	}{
		{
			name:  "merged field by field",
			doc:   `{"ociVersion":"1.0.2","linux":{"cgroupsPath":"/p/c","resources":{"devices":[{"allow":false,"access":"rwm"}],"memory":{"limit":100,"swap":200},"pids":{"limit":10}}}}`,
			patch: `{"memory":{"limit":300},"cpu":{"shares":512}}`,
			want:  `{"linux":{"cgroupsPath":"/p/c","resources":{"cpu":{"shares":512},"devices":[{"access":"rwm","allow":false}],"memory":{"limit":300,"swap":200},"pids":{"limit":10}}},"ociVersion":"1.0.2"}`,
		},
		{
			name:  "no resources yet",
			doc:   `{"linux":{}}`,
			patch: `{"memory":{"limit":1}}`,
			want:  `{"linux":{"resources":{"memory":{"limit":1}}}}`,
		},
		{
			name:  "no linux section",
			doc:   `{"process":{"args":["sh"]}}`,
			patch: `{"pids":{"limit":5}}`,
			want:  `{"linux":{"resources":{"pids":{"limit":5}}},"process":{"args":["sh"]}}`,
		},
		{
			name:  "64-bit numbers and unknown fields kept",
			doc:   `{"linux":{"resources":{"memory":{"limit":9223372036854771712}},"futureField":{"x":18446744073709551615}}}`,
			patch: `{"cpu":{"quota":-1,"period":100000},"unified":{"memory.high":"max"}}`,
			want:  `{"linux":{"futureField":{"x":18446744073709551615},"resources":{"cpu":{"period":100000,"quota":-1},"memory":{"limit":9223372036854771712},"unified":{"memory.high":"max"}}}}`,
		},
		{
			name:  "lists replaced",
			doc:   `{"linux":{"resources":{"hugepageLimits":[{"pageSize":"2MB","limit":1},{"pageSize":"1GB","limit":2}]}}}`,
			patch: `{"hugepageLimits":[{"pageSize":"2MB","limit":3}]}`,
			want:  `{"linux":{"resources":{"hugepageLimits":[{"limit":3,"pageSize":"2MB"}]}}}`,
		},
		{name: "bad spec", doc: `{"linux":`, patch: `{}`, bad: true},
		{name: "spec not an object", doc: `null`, patch: `{}`, bad: true},
		{name: "bad patch", doc: `{}`, patch: `[1]`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := mergeSpecResources([]byte(tc.doc), []byte(tc.patch))
			if tc.bad {
				if err == nil {
					t.Fatalf("mergeSpecResources succeeded: %s", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Compare compactly: the output is indented.
			var compact strings.Builder
			dec := json.NewDecoder(strings.NewReader(string(out)))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			enc := json.NewEncoder(&compact)
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(compact.String()); got != tc.want {
				t.Errorf("merged =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestUpdateSpecResourcesAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(`{"ociVersion":"1.0.2"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := UpdateSpecResources(path, []byte(`{"memory":{"limit":42}}`)); err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Version != "1.0.2" || spec.Linux == nil || spec.Linux.Resources == nil || *spec.Linux.Resources.Memory.Limit != 42 {
		t.Errorf("spec after update = %+v", spec)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after update = %v, %v; want 0640", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left beside config.json: %v", entries)
	}
	// A bad patch leaves the file as it was.
	before, _ := os.ReadFile(path)
	if err := UpdateSpecResources(path, []byte(`nope`)); err == nil {
		t.Error("bad patch accepted")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("config.json changed by a failed update")
	}
	if err := UpdateSpecResources(filepath.Join(dir, "missing.json"), []byte(`{}`)); err == nil {
		t.Error("update of a missing file succeeded")
	}
}
