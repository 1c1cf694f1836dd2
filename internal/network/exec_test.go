package network

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// TestPluginExecTimeout: a plugin that hangs, and a child it started, are
// killed at the timeout, and the error says which plugin and verb.
func TestPluginExecTimeout(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "hang")
	script := "#!/bin/sh\necho $$ > " + dir + "/plugin.pid\nsleep 60 &\necho $! > " + dir + "/child.pid\nwait\n"
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &pluginExec{timeout: 500 * time.Millisecond}
	start := time.Now()
	_, err := e.ExecPlugin(context.Background(), plugin, []byte("{}"), []string{"CNI_COMMAND=ADD"})
	if d := time.Since(start); d > 500*time.Millisecond+pluginWaitDelay+time.Second {
		t.Errorf("returned after %v", d)
	}
	var te *PluginTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v: want a *PluginTimeoutError wrapping DeadlineExceeded", err)
	}
	if te.Plugin != "hang" || te.Command != "ADD" || !strings.Contains(err.Error(), "plugin_timeout") {
		t.Errorf("error %q does not name the plugin, verb and setting", err)
	}
	for _, f := range []string{"plugin.pid", "child.pid"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		deadline := time.Now().Add(2 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		// The child is reparented and may linger as a zombie of init for
		// a moment; a zombie's state is Z.
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(stat), ") Z ") {
			t.Errorf("%s %d still running after the timeout", f, pid)
		}
	}
}

// TestPluginExecErrors: a plugin's CNI error comes back as RawExec gives
// it, and a caller's own cancellation is not reported as a plugin timeout.
func TestPluginExecErrors(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "fails")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho '{\"code\":7,\"msg\":\"bad conf\"}'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &pluginExec{timeout: time.Minute}
	_, err := e.ExecPlugin(context.Background(), plugin, nil, nil)
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != 7 || cniErr.Msg != "bad conf" {
		t.Errorf("err %#v: want the plugin's CNI error", err)
	}

	sleeper := filepath.Join(dir, "sleeps")
	if err := os.WriteFile(sleeper, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = e.ExecPlugin(ctx, sleeper, nil, nil)
	var te *PluginTimeoutError
	if err == nil || errors.As(err, &te) {
		t.Errorf("caller's deadline: %v, want a plain plugin error", err)
	}
}
