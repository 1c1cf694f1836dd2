package specgen

import (
	"errors"
	"slices"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestContainerArgs(t *testing.T) {
	ep, cmd := []string{"/entry", "-x"}, []string{"serve", "--port=80"}
	for _, tc := range []struct {
		name                          string
		command, args, entrypoint, ic []string
		want                          []string // nil: an invalid argument error
	}{
		{"image entrypoint and cmd", nil, nil, ep, cmd, []string{"/entry", "-x", "serve", "--port=80"}},
		{"image cmd only", nil, nil, nil, cmd, cmd},
		{"image entrypoint only", nil, nil, ep, nil, ep},
		{"args replace cmd", nil, []string{"a"}, ep, cmd, []string{"/entry", "-x", "a"}},
		{"args without entrypoint", nil, []string{"a", "b"}, nil, cmd, []string{"a", "b"}},
		{"command drops entrypoint and cmd", []string{"/bin/true"}, nil, ep, cmd, []string{"/bin/true"}},
		{"command and args", []string{"/bin/echo"}, []string{"hi"}, ep, cmd, []string{"/bin/echo", "hi"}},
		{"command without image config", []string{"/bin/sh", "-c"}, []string{"exit 0"}, nil, nil, []string{"/bin/sh", "-c", "exit 0"}},
		{"empty-string entrypoint is cleared", nil, nil, []string{""}, cmd, cmd},
		{"empty-string entrypoint with args", nil, []string{"a"}, []string{""}, cmd, []string{"a"}},
		{"empty-string entrypoint alone", nil, nil, []string{""}, nil, nil},
		{"nothing at all", nil, nil, nil, nil, nil},
		{"empty program name", []string{""}, []string{"a"}, ep, cmd, nil},
		{"empty program name from the image", nil, nil, nil, []string{"", "x"}, nil},
		{"NUL in the command", []string{"/bin/a\x00b"}, nil, ep, cmd, nil},
		{"NUL in an arg", nil, []string{"a\x00b"}, ep, cmd, nil},
		{"empty slices", []string{}, []string{}, []string{}, []string{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Command, c.Args, c.Image.Entrypoint, c.Image.Cmd = tc.command, tc.args, tc.entrypoint, tc.ic
			s, err := ContainerSpec(c, Host{})
			if tc.want == nil {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Process.Args, tc.want) {
				t.Fatalf("args %q, want %q", s.Process.Args, tc.want)
			}
		})
	}
}

func TestContainerArgsDoNotAlias(t *testing.T) {
	c := testContainer()
	c.Image.Entrypoint = make([]string, 1, 8)
	c.Image.Entrypoint[0] = "/entry"
	c.Args = []string{"a"}
	s := mustSpec(t, c, Host{})
	s.Process.Args[0] = "changed"
	if c.Image.Entrypoint[0] != "/entry" {
		t.Fatal("spec args alias the image entrypoint")
	}
	if c.Image.Entrypoint[:2][1] != "" {
		t.Fatal("spec args were appended into the image entrypoint's backing array")
	}
}

func TestContainerEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		image    []string
		cri      []KeyValue
		hostname string
		want     []string // nil: an invalid argument error
	}{
		{"defaults", nil, nil, "web", []string{defaultPath, "HOSTNAME=web"}},
		{"no hostname", nil, nil, "", []string{defaultPath}},
		{"image PATH replaces the default in place", []string{"PATH=/bin", "A=1"}, nil, "web", []string{"PATH=/bin", "HOSTNAME=web", "A=1"}},
		{"container overrides image by key, in place", []string{"A=1", "B=2"}, []KeyValue{{"A", "x"}, {"C", "3"}}, "web",
			[]string{defaultPath, "HOSTNAME=web", "A=x", "B=2", "C=3"}},
		{"container overrides HOSTNAME", nil, []KeyValue{{"HOSTNAME", "mine"}}, "web", []string{defaultPath, "HOSTNAME=mine"}},
		{"image overrides HOSTNAME", []string{"HOSTNAME=img"}, nil, "web", []string{defaultPath, "HOSTNAME=img"}},
		{"image bare key unsets", []string{"A=1", "HOSTNAME", "B=2"}, nil, "web", []string{defaultPath, "A=1", "B=2"}},
		{"image bare key then set again", []string{"PATH", "A=1", "PATH=/x"}, nil, "", []string{"A=1", "PATH=/x"}},
		{"image bare unknown key ignored", []string{"NOPE"}, nil, "", []string{defaultPath}},
		{"image duplicate keys keep the last", []string{"A=1", "A=2"}, nil, "", []string{defaultPath, "A=2"}},
		{"values may hold = and be empty", nil, []KeyValue{{"Q", "a=b=c"}, {"E", ""}}, "", []string{defaultPath, "Q=a=b=c", "E="}},
		{"image entry without a key is dropped", []string{"=oops"}, nil, "", []string{defaultPath}},
		{"empty container key", nil, []KeyValue{{"", "v"}}, "", nil},
		{"container key with =", nil, []KeyValue{{"A=B", "v"}}, "", nil},
		{"NUL in a container key", nil, []KeyValue{{"A\x00B", "v"}}, "", nil},
		{"NUL in a container value", nil, []KeyValue{{"A", "v\x00w"}}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Image.Env, c.Env, c.Hostname = tc.image, tc.cri, tc.hostname
			s, err := ContainerSpec(c, Host{})
			if tc.want == nil {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Process.Env, tc.want) {
				t.Fatalf("env %q, want %q", s.Process.Env, tc.want)
			}
		})
	}
}

func TestContainerCwd(t *testing.T) {
	for _, tc := range []struct {
		name, container, image, want string
	}{
		{"neither", "", "", "/"},
		{"image", "", "/srv", "/srv"},
		{"container", "/work", "", "/work"},
		{"container wins", "/work", "/srv", "/work"},
		// runc: "Cwd must be an absolute path".
		{"relative container dir", "work", "/srv", ""},
		{"relative image dir", "", "srv", ""},
		{"NUL", "/a\x00b", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.WorkingDir, c.Image.WorkingDir = tc.container, tc.image
			if tc.want == "" {
				if _, err := ContainerSpec(c, Host{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v, want an invalid argument", err)
				}
				return
			}
			if got := mustSpec(t, c, Host{}).Process.Cwd; got != tc.want {
				t.Fatalf("cwd %q, want %q", got, tc.want)
			}
		})
	}
}

// CheckProcess refuses before anything is made what ContainerSpec would
// refuse of the CRI config's process; the image's part it cannot know.
func TestCheckProcess(t *testing.T) {
	for _, tc := range []struct {
		name          string
		command, args []string
		env           []KeyValue
		dir           string
		ok            bool
	}{
		{"nothing: the image decides", nil, nil, nil, "", true},
		{"plain", []string{"/bin/sh", "-c"}, []string{"exit 0"}, []KeyValue{{"A", "b=c"}, {"E", ""}}, "/work", true},
		{"args only", nil, []string{"a"}, nil, "", true},
		{"empty program name", []string{""}, nil, nil, "", false},
		{"empty first arg is the image's business", nil, []string{""}, nil, "", true},
		{"NUL in the command", []string{"a\x00b"}, nil, nil, "", false},
		{"NUL in an arg", nil, []string{"x", "a\x00b"}, nil, "", false},
		{"empty env name", nil, nil, []KeyValue{{"", "v"}}, "", false},
		{"= in an env name", nil, nil, []KeyValue{{"A=B", "v"}}, "", false},
		{"NUL in an env name", nil, nil, []KeyValue{{"A\x00", "v"}}, "", false},
		{"NUL in an env value", nil, nil, []KeyValue{{"A", "\x00"}}, "", false},
		{"relative working dir", nil, nil, nil, "work", false},
		{"NUL in the working dir", nil, nil, nil, "/a\x00b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckProcess(tc.command, tc.args, tc.env, tc.dir)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
				t.Fatalf("CheckProcess: %v, want ok=%v or an invalid argument", err, tc.ok)
			}
		})
	}
}
