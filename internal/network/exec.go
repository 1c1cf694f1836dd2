package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"
)

// DefaultPluginTimeout bounds each plugin invocation when
// Config.PluginTimeout is zero. A working plugin answers in milliseconds to
// a few seconds (IPAM round trips included); a minute is far above that,
// and short enough that a hung ADD and the DEL that undoes it both end
// well within the server's sandbox_timeout, so the pod's rollback always
// gets to run.
const DefaultPluginTimeout = time.Minute

// pluginWaitDelay is how long a killed plugin's output pipes may stay open
// (held by a child it started) before the call returns anyway.
const pluginWaitDelay = time.Second

// PluginTimeoutError is a plugin invocation that did not finish within
// Config.PluginTimeout; the plugin and its process group were killed. It
// wraps context.DeadlineExceeded, which the server reports as the gRPC
// code DeadlineExceeded.
type PluginTimeoutError struct {
	Plugin  string // the plugin's type (binary name)
	Command string // CNI_COMMAND: ADD, DEL, CHECK, VERSION, …
	Timeout time.Duration
}

func (e *PluginTimeoutError) Error() string {
	return fmt.Sprintf("cni plugin %s %s gave no answer within %s (network plugin_timeout) and was killed",
		e.Plugin, e.Command, e.Timeout)
}

// Unwrap classifies the error.
func (e *PluginTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// pluginExec runs CNI plugins as libcni's invoke.RawExec does, with every
// invocation bounded by a timeout. A plugin that runs past it is killed
// together with its process group (it leads one of its own, so the kill
// reaches what it started, such as an iptables call, and nothing else),
// by pid; a child that escaped the group and holds the plugin's output
// open delays the return by pluginWaitDelay at most.
type pluginExec struct {
	version.PluginDecoder
	timeout time.Duration
	stderr  io.Writer // where a successful plugin's stderr goes
}

var _ invoke.Exec = (*pluginExec)(nil)

// ExecPlugin runs pluginPath with stdin and environ and returns its stdout.
func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	pctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		stdout, stderr, err := e.run(pctx, pluginPath, stdin, environ)
		if err == nil {
			if e.stderr != nil && len(stderr) > 0 {
				_, _ = e.stderr.Write(stderr)
			}
			return stdout, nil
		}
		if ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return nil, &PluginTimeoutError{
				Plugin:  filepath.Base(pluginPath),
				Command: envValue(environ, "CNI_COMMAND"),
				Timeout: e.timeout,
			}
		}
		// As RawExec: a plugin binary being replaced is retried.
		if strings.Contains(err.Error(), "text file busy") && attempt < 5 {
			select {
			case <-time.After(time.Second):
				continue
			case <-pctx.Done():
			}
		}
		return nil, pluginError(err, stdout, stderr)
	}
}

func (e *pluginExec) run(ctx context.Context, pluginPath string, stdin []byte, environ []string) (stdout, stderr []byte, err error) {
	var outBuf, errBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	// Its own process group: a signal to the daemon's group must not stop
	// a plugin half way, and a timeout kills what the plugin started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The group's id is the plugin's pid, which cannot be reused
		// before cmd.Wait reaps it.
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	cmd.WaitDelay = pluginWaitDelay
	err = cmd.Run()
	return outBuf.Bytes(), errBuf.Bytes(), err
}

// FindInPath finds a plugin binary in paths.
func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// pluginError is RawExec's error for a failed plugin: the CNI error the
// plugin printed, or its stderr.
func pluginError(err error, stdout, stderr []byte) error {
	emsg := types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed: %q", string(stderr))
	default:
		if perr := json.Unmarshal(stdout, &emsg); perr != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
		}
	}
	return &emsg
}

// envValue returns the value of key in environ.
func envValue(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
