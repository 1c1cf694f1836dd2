package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

func TestConfigValidation(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin")
	notExe := filepath.Join(dir, "data")
	for path, mode := range map[string]os.FileMode{exe: 0o755, notExe: 0o644} {
		if err := os.WriteFile(path, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	valid := Config{
		Name: "runc", RuntimePath: exe, ConmonPath: exe,
		RuntimeRoot: filepath.Join(dir, "root"), ExitDir: filepath.Join(dir, "exits"), SocketDir: filepath.Join(dir, "socks"),
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{name: "valid", mutate: func(*Config) {}, ok: true},
		{name: "no name", mutate: func(c *Config) { c.Name = "" }},
		{name: "relative runtime", mutate: func(c *Config) { c.RuntimePath = "runc" }},
		{name: "missing conmon", mutate: func(c *Config) { c.ConmonPath = filepath.Join(dir, "nope") }},
		{name: "conmon not executable", mutate: func(c *Config) { c.ConmonPath = notExe }},
		{name: "runtime is a directory", mutate: func(c *Config) { c.RuntimePath = dir }},
		{name: "relative exit dir", mutate: func(c *Config) { c.ExitDir = "exits" }},
		{name: "empty socket dir", mutate: func(c *Config) { c.SocketDir = "" }},
		{name: "bad log level", mutate: func(c *Config) { c.ConmonLogLevel = "loud" }},
		{name: "debug log level", mutate: func(c *Config) { c.ConmonLogLevel = "debug" }, ok: true},
		{name: "negative size", mutate: func(c *Config) { c.LogSizeMax = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.mutate(&cfg)
			got, err := cfg.withDefaults()
			if (err == nil) != tc.ok {
				t.Fatalf("withDefaults() error = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not ErrInvalidArgument", err)
			}
			if tc.ok && (got.CreateTimeout != DefaultCreateTimeout || got.CommandTimeout != DefaultCommandTimeout || got.ExitPollInterval != DefaultExitPollInterval) {
				t.Errorf("defaults not applied: %+v", got)
			}
		})
	}

	r, err := New(valid)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer r.Close()
	for _, d := range []string{valid.RuntimeRoot, valid.ExitDir, valid.SocketDir} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("New did not create %s: %v", d, err)
		}
	}
	if r.Name() != "runc" || r.cfg.ConmonLogLevel != DefaultConmonLogLevel {
		t.Errorf("Name = %q, log level = %q", r.Name(), r.cfg.ConmonLogLevel)
	}
}

func TestRuntimeState(t *testing.T) {
	created := time.Date(2026, 11, 22, 8, 35, 26, 852949299, time.UTC)
	for _, tc := range []struct {
		in   string
		want runtime.State
	}{
		{
			in:   `{"ociVersion":"1.0.2-dev","id":"c4","pid":13071,"status":"created","bundle":"/tmp/b","rootfs":"/tmp/b/rootfs","created":"2026-11-22T08:35:26.852949299Z","owner":""}`,
			want: runtime.State{ID: "c4", Status: runtime.StatusCreated, Pid: 13071, Bundle: "/tmp/b", Created: created},
		},
		{
			in:   `{"id":"c4","pid":0,"status":"stopped","bundle":"/tmp/b","created":"2026-11-22T08:35:26.852949299Z"}`,
			want: runtime.State{ID: "c4", Status: runtime.StatusStopped, Bundle: "/tmp/b", Created: created},
		},
		{in: `{"pid":5,"status":"running"}`, want: runtime.State{Status: runtime.StatusRunning, Pid: 5}},
		{in: `{"pid":5,"status":"paused"}`, want: runtime.State{Status: runtime.StatusPaused, Pid: 5}},
		{in: `{"pid":5,"status":"creating"}`, want: runtime.State{Status: runtime.StatusUnknown, Pid: 5}},
	} {
		var rs runtimeState
		if err := json.Unmarshal([]byte(tc.in), &rs); err != nil {
			t.Fatal(err)
		}
		if got := rs.state(); got != tc.want {
			t.Errorf("state of %s = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestRuntimeErrors drives the runtime call path with a fake runtime that
// prints runc's messages.
func TestRuntimeErrors(t *testing.T) {
	r := newFakeRuntime(t, nil)
	script := `#!/bin/sh
# $1=--root $2=<root> $3=op $4...
case "$3" in
state) echo 'time="2026-11-22T08:35:25Z" level=error msg="container does not exist"' >&2; exit 1 ;;
start) echo 'time="2026-11-22T08:35:25Z" level=error msg="cannot start an already running container"' >&2; exit 1 ;;
esac
exit 1
`
	if err := os.WriteFile(r.cfg.RuntimePath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.State(ctx, "c1"); !errdefs.IsNotFound(err) {
		t.Errorf("State of an unknown ID = %v, want ErrNotFound", err)
	}
	if err := r.Stop(ctx, "c1", time.Second, 0); err != nil {
		t.Errorf("Stop of an unknown ID = %v, want nil", err)
	}
	if err := r.Delete(ctx, "c1"); err != nil {
		t.Errorf("Delete of an unknown ID = %v, want nil", err)
	}
	// The state directory exists, so only the message says "unknown" here.
	if err := os.MkdirAll(filepath.Join(r.cfg.RuntimeRoot, "c2"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := r.Start(ctx, "c2")
	if err == nil || !strings.Contains(err.Error(), "cannot start an already running container") {
		t.Errorf("Start error = %v, want the runtime's message", err)
	}
	if errdefs.IsNotFound(err) {
		t.Errorf("Start error %v classified as not found", err)
	}
	if _, err := r.Create(ctx, runtime.CreateOptions{ID: "c/1", BundleDir: "/b"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create with a bad ID = %v, want ErrInvalidArgument", err)
	}
	if _, err := r.Create(ctx, runtime.CreateOptions{ID: "c1", BundleDir: "b"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create with a relative bundle = %v, want ErrInvalidArgument", err)
	}
}
