package hooks

import (
	"fmt"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// prog is a path that exists on every test host.
const prog = "/bin/sh"

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr string
		check   func(t *testing.T, c *Config)
	}{
		{
			name: "1.0.0 full",
			json: `{"version":"1.0.0","hook":{"path":"/bin/sh","args":["sh","-c","true"],"env":["A=b"],"timeout":5},
				"when":{"annotations":{"^a$":"b"},"commands":["sh$"],"hasBindMounts":true},"stages":["prestart","poststop"]}`,
			check: func(t *testing.T, c *Config) {
				if c.Hook.Path != prog || len(c.Hook.Args) != 3 || *c.Hook.Timeout != 5 || len(c.Hook.Env) != 1 {
					t.Errorf("hook = %+v", c.Hook)
				}
				if len(c.annotations) != 1 || len(c.commands) != 1 || c.hasBindMounts == nil || c.anyOf {
					t.Errorf("conditions not compiled: %+v", c)
				}
			},
		},
		{name: "always", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"always":true},"stages":["createRuntime"]}`},
		{name: "always false is a condition", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"always":false},"stages":["poststart"]}`},
		{name: "not JSON", json: `{"version":`, wantErr: "parse"},
		{name: "unknown version", json: `{"version":"2.0.0","hook":{"path":"/bin/sh"},"when":{"always":true},"stages":["poststop"]}`, wantErr: "unknown hook version"},
		{name: "no path", json: `{"version":"1.0.0","hook":{},"when":{"always":true},"stages":["poststop"]}`, wantErr: "hook.path is required"},
		{name: "relative path", json: `{"version":"1.0.0","hook":{"path":"sh"},"when":{"always":true},"stages":["poststop"]}`, wantErr: "must be absolute"},
		{name: "missing program", json: `{"version":"1.0.0","hook":{"path":"/nonexistent/hook"},"when":{"always":true},"stages":["poststop"]}`, wantErr: "no such file"},
		{name: "zero timeout", json: `{"version":"1.0.0","hook":{"path":"/bin/sh","timeout":0},"when":{"always":true},"stages":["poststop"]}`, wantErr: "timeout"},
		{name: "no condition", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{},"stages":["poststop"]}`, wantErr: "at least one of"},
		{name: "no when", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"stages":["poststop"]}`, wantErr: "at least one of"},
		{name: "no stages", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"always":true}}`, wantErr: "stages is required"},
		{name: "unknown stage", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"always":true},"stages":["precreate"]}`, wantErr: `unknown stage "precreate"`},
		{name: "bad key regexp", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"annotations":{"(":"x"}},"stages":["poststop"]}`, wantErr: "when.annotations key"},
		{name: "bad value regexp", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"annotations":{"x":"["}},"stages":["poststop"]}`, wantErr: "when.annotations value"},
		{name: "bad command regexp", json: `{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":{"commands":["*"]},"stages":["poststop"]}`, wantErr: "when.commands"},
		{
			name: "legacy",
			json: `{"hook":"/bin/sh","arguments":["-c","true"],"stage":["prestart"],"cmds":["^/init$"],"annotations":["fluid"],"hasbindmounts":true}`,
			check: func(t *testing.T, c *Config) {
				if !c.anyOf || strings.Join(c.Hook.Args, " ") != "/bin/sh -c true" || c.Stages[0] != "prestart" {
					t.Errorf("legacy conversion: %+v", c)
				}
				if len(c.annotations) != 1 || c.annotations[0].key.String() != ".*" || c.annotations[0].value.String() != "fluid" {
					t.Errorf("legacy annotations: %+v", c.annotations)
				}
			},
		},
		{name: "legacy explicit version", json: `{"version":"0.1.0","hook":"/bin/sh","stages":["poststop"],"cmd":["x"]}`},
		{name: "legacy both synonyms", json: `{"hook":"/bin/sh","stages":["poststop"],"stage":["poststop"],"cmd":["x"]}`, wantErr: "not both"},
		{name: "legacy no hook", json: `{"stages":["poststop"],"cmd":["x"]}`, wantErr: "hook is required"},
		{name: "legacy no condition", json: `{"hook":"/bin/sh","stages":["poststop"]}`, wantErr: "at least one of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.json))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(): %v", err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	spec := func(args ...string) *specs.Spec { return &specs.Spec{Process: &specs.Process{Args: args}} }
	ann := map[string]string{"com.example.department": "fluid-dynamics", "io.kubernetes.pod.name": "web"}
	tests := []struct {
		name string
		when string // the 1.0.0 "when" object, or a whole legacy file
		c    Container
		want bool
	}{
		{"always", `{"always":true}`, Container{}, true},
		{"always false", `{"always":false}`, Container{}, false},
		{"annotation matches", `{"annotations":{"^com\\.example\\.department$":".*fluid-dynamics$"}}`, Container{Annotations: ann}, true},
		{"annotation value differs", `{"annotations":{"^com\\.example\\.department$":"^solid"}}`, Container{Annotations: ann}, false},
		{"annotation key absent", `{"annotations":{"^missing$":".*"}}`, Container{Annotations: ann}, false},
		{"annotation unanchored", `{"annotations":{"department":"fluid"}}`, Container{Annotations: ann}, true},
		{"every annotation pair must match", `{"annotations":{"department":"fluid","pod\\.name":"^db$"}}`, Container{Annotations: ann}, false},
		{"two annotation pairs match", `{"annotations":{"department":"fluid","pod\\.name":"^web$"}}`, Container{Annotations: ann}, true},
		{"no annotations", `{"annotations":{".*":".*"}}`, Container{}, false},
		{"command matches", `{"commands":[".*/init$","^sh$"]}`, Container{Spec: spec("sh", "-c", "x")}, true},
		{"command is args[0] only", `{"commands":["^-c$"]}`, Container{Spec: spec("sh", "-c", "x")}, false},
		{"command without process", `{"commands":[".*"]}`, Container{Spec: &specs.Spec{}}, false},
		{"bind mounts", `{"hasBindMounts":true}`, Container{HasBindMounts: true}, true},
		{"no bind mounts", `{"hasBindMounts":true}`, Container{}, false},
		{"hasBindMounts false never matches", `{"hasBindMounts":false}`, Container{}, false},
		{"conditions are ANDed", `{"always":true,"commands":["^sh$"]}`, Container{Spec: spec("top")}, false},
		{"all conditions met", `{"always":true,"commands":["^sh$"],"hasBindMounts":true,"annotations":{"pod":"web"}}`,
			Container{Spec: spec("sh"), HasBindMounts: true, Annotations: ann}, true},
		{"always false vetoes", `{"always":false,"hasBindMounts":true}`, Container{HasBindMounts: true}, false},
		{"legacy: any condition", `legacy:{"hook":"/bin/sh","stages":["poststop"],"cmds":["^nomatch$"],"hasbindmounts":true}`,
			Container{Spec: spec("sh"), HasBindMounts: true}, true},
		{"legacy: annotation value", `legacy:{"hook":"/bin/sh","stages":["poststop"],"annotations":["fluid"]}`, Container{Annotations: ann}, true},
		{"legacy: none", `legacy:{"hook":"/bin/sh","stages":["poststop"],"cmds":["^nomatch$"],"annotations":["nomatch"]}`,
			Container{Spec: spec("sh"), Annotations: ann}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := fmt.Sprintf(`{"version":"1.0.0","hook":{"path":"/bin/sh"},"when":%s,"stages":["poststop"]}`, tt.when)
			if rest, ok := strings.CutPrefix(tt.when, "legacy:"); ok {
				doc = rest
			}
			c, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if tt.c.Spec == nil {
				tt.c.Spec = spec("sh")
			}
			if got := c.Match(tt.c); got != tt.want {
				t.Errorf("Match() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInjectStages(t *testing.T) {
	c, err := Parse([]byte(`{"version":"1.0.0","hook":{"path":"/bin/sh","args":["sh"],"timeout":3},"when":{"always":true},
		"stages":["prestart","createRuntime","createContainer","startContainer","poststart","poststop"]}`))
	if err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{}
	c.inject(spec)
	h := spec.Hooks
	// prestart goes to createRuntime, as containers/common does.
	//lint:ignore SA1019 prestart is checked to stay empty
	prestart := h.Prestart
	if len(prestart) != 0 || len(h.CreateRuntime) != 2 || len(h.CreateContainer) != 1 ||
		len(h.StartContainer) != 1 || len(h.Poststart) != 1 || len(h.Poststop) != 1 {
		t.Fatalf("hooks = %+v", h)
	}
	h.Poststop[0].Args[0] = "changed"
	*h.Poststop[0].Timeout = 9
	if h.Poststart[0].Args[0] != "sh" || *h.Poststart[0].Timeout != 3 || c.Hook.Args[0] != "sh" {
		t.Fatal("injected hooks share their slices or timeout")
	}
}
