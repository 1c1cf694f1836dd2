package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// daemonInfo is the verbose Status info (what `crictl info` prints), each
// value decoded.
type daemonInfo struct {
	Config map[string]any
	// RuntimeHandlerConfig is the usable handlers by name.
	RuntimeHandlerConfig map[string]struct {
		Type    string `json:"type"`
		Default bool   `json:"default"`
	}
	Unavailable map[string]string
	CNIConfig   struct {
		ConfDir string `json:"confDir"`
		File    string `json:"file"`
		Network string `json:"network"`
	}
	CNILoadStatus string
	LastReload    *struct {
		Time          time.Time `json:"time"`
		Error         string    `json:"error"`
		Applied       []string  `json:"applied"`
		Refused       []string  `json:"refused"`
		RestartNeeded []string  `json:"restartNeeded"`
	}
	// Handlers are the names Status lists (without the default's "").
	Handlers []string
}

func (e *env) daemonInfo(t *testing.T) daemonInfo {
	t.Helper()
	resp, err := e.rt.Status(rpcCtx(t), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var info daemonInfo
	for key, dst := range map[string]any{
		"config": &info.Config, "runtimeHandlerConfig": &info.RuntimeHandlerConfig, "unavailableRuntimes": &info.Unavailable,
		"cniconfig": &info.CNIConfig, "lastCNILoadStatus": &info.CNILoadStatus, "lastReload": &info.LastReload,
	} {
		raw, ok := resp.Info[key]
		if !ok {
			t.Fatalf("Status verbose info has no %q: keys %v", key, sortedKeys(resp.Info))
		}
		if err := json.Unmarshal([]byte(raw), dst); err != nil {
			t.Fatalf("Status verbose info %q: %v\n%s", key, err, raw)
		}
	}
	for _, h := range resp.RuntimeHandlers {
		if h.Name != "" {
			info.Handlers = append(info.Handlers, h.Name)
		}
	}
	return info
}

// writeConfig rewrites the daemon's configuration file from the env's
// options, with edit applied to the text.
func (e *env) writeConfig(t *testing.T, edit func(string) string) {
	t.Helper()
	text := e.daemonConfig()
	if edit != nil {
		text = edit(text)
	}
	if err := os.WriteFile(e.configPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sighup sends SIGHUP to the daemon and waits until the reload it
// triggers is done (Status reports a newer reload).
func (e *env) sighup(t *testing.T) daemonInfo {
	t.Helper()
	before := e.daemonInfo(t).LastReload
	pid := e.daemonPid()
	if pid == 0 {
		t.Fatal("podbayd is not running")
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		info := e.daemonInfo(t)
		if info.LastReload != nil && (before == nil || info.LastReload.Time.After(before.Time)) {
			return info
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no reload reported within 30s of SIGHUP:\n%s", e.logTail(30))
	return daemonInfo{}
}

func containsPrefix(list []string, prefix string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestReloadOnSIGHUP rewrites a running daemon's configuration file and
// sends SIGHUP: a handler is added and a pod with a container runs on it;
// removing that handler while the pod uses it is refused and the container
// keeps working; an invalid file changes nothing; once the pod is gone the
// removal takes effect. The log level follows the file, a key that needs a
// restart is reported, and `crictl info` (verbose Status) shows the
// configuration in effect under the file's keys.
func TestReloadOnSIGHUP(t *testing.T) {
	e, ti := newContainerEnvWith(t, envOptions{logLevelFromFile: true}, "busybox")

	info := e.daemonInfo(t)
	if !slices.Equal(info.Handlers, []string{"runc"}) || info.LastReload != nil {
		t.Fatalf("before any reload: handlers %q, last reload %+v", info.Handlers, info.LastReload)
	}
	network, _ := info.Config["network"].(map[string]any)
	if info.Config["log_level"] != "debug" || info.Config["default_cgroup_parent"] != e.cgroupRoot || network["conf_dir"] != e.confDir {
		t.Errorf("config under the file's keys: %v", info.Config)
	}
	if info.CNILoadStatus != "OK" || info.CNIConfig.Network != e.netName || info.CNIConfig.ConfDir != e.confDir {
		t.Errorf("cni config in use: %+v, status %q", info.CNIConfig, info.CNILoadStatus)
	}

	// Add a handler, lower the log level, move the cgroup parent (which
	// needs a restart).
	e.opts.extraRuntimes = map[string]handlerOptions{"extra": {}}
	reloaded := func(s string) string {
		s = strings.Replace(s, `log_level = "debug"`, `log_level = "info"`, 1)
		return strings.Replace(s, "default_cgroup_parent = \""+e.cgroupRoot+"\"", "default_cgroup_parent = \""+e.otherCgroupRoot()+"\"", 1)
	}
	e.writeConfig(t, reloaded)
	info = e.sighup(t)
	r := info.LastReload
	if r.Error != "" || !containsPrefix(r.Applied, "runtimes.extra added") || !containsPrefix(r.Applied, `log_level "debug" -> "info"`) {
		t.Fatalf("reload result %+v", r)
	}
	if !containsPrefix(r.RestartNeeded, "default_cgroup_parent") || info.Config["default_cgroup_parent"] != e.cgroupRoot {
		t.Errorf("a key needing a restart: result %+v, in effect %v", r.RestartNeeded, info.Config["default_cgroup_parent"])
	}
	if !slices.Equal(info.Handlers, []string{"extra", "runc"}) || info.Config["log_level"] != "info" {
		t.Fatalf("after adding a handler: handlers %q, log_level %v", info.Handlers, info.Config["log_level"])
	}
	logSize := fileSize(t, e.logPath)

	cfg := e.podConfig("on-extra")
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := testPod{id: e.runPod(t, cfg, "extra"), cfg: cfg}
	if st, _ := e.status(t, pod.id); st.RuntimeHandler != "extra" || st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod on the added handler: handler %q, state %v", st.RuntimeHandler, st.State)
	}
	ctr, _ := e.runContainer(t, pod, containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	// Every RPC logs at debug: at info, none of them shows.
	if tail := fileFrom(t, e.logPath, logSize); strings.Contains(tail, "level=DEBUG") {
		t.Errorf("debug lines logged after log_level became info:\n%s", tail)
	}

	// Removing the handler the pod runs on is refused; the pod keeps
	// working.
	e.opts.extraRuntimes = nil
	e.writeConfig(t, reloaded)
	info = e.sighup(t)
	if !containsPrefix(info.LastReload.Refused, "runtimes.extra: not removed") || !slices.Contains(info.Handlers, "extra") {
		t.Fatalf("removal of a handler in use: %+v, handlers %q", info.LastReload, info.Handlers)
	}
	if out := e.execOutput(t, ctr, "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("exec in the pod after the refused removal: %q", out)
	}

	// An invalid file changes nothing.
	if err := os.WriteFile(e.configPath, []byte("log_level = \"loud\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	info = e.sighup(t)
	if !strings.Contains(info.LastReload.Error, "log_level") || !slices.Contains(info.Handlers, "extra") ||
		info.Config["log_level"] != "info" || info.Config["listen"] != e.sock {
		t.Fatalf("invalid file: result %+v, handlers %q, config %v", info.LastReload, info.Handlers, info.Config)
	}

	// With the pod gone, the same file removes the handler.
	e.stopContainer(t, ctr, 10)
	e.removeContainer(t, ctr)
	e.stopAndRemove(t, pod.id)
	e.writeConfig(t, reloaded)
	info = e.sighup(t)
	if !containsPrefix(info.LastReload.Applied, "runtimes.extra removed") || len(info.LastReload.Refused) != 0 ||
		!slices.Equal(info.Handlers, []string{"runc"}) {
		t.Fatalf("removal of an unused handler: %+v, handlers %q", info.LastReload, info.Handlers)
	}
	if _, err := e.tryRunPod(rpcCtx(t), e.podConfig("late"), "extra"); code(err) != codes.InvalidArgument {
		t.Errorf("pod on a removed handler: %v, want InvalidArgument", err)
	}
	// The default handler still serves.
	id := e.runPod(t, e.podConfig("after"), "")
	e.stopAndRemove(t, id)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// fileFrom returns path's content from offset on.
func fileFrom(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(offset, int64(len(b))):])
}

// TestReloadRegistries points a running daemon at another registries.conf.d
// and policy.json by SIGHUP: pulls follow the new files at once.
func TestReloadRegistries(t *testing.T) {
	e, ti := newContainerEnvWith(t, envOptions{}, "busybox")
	empty := filepath.Join(e.dir, "empty.d")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	reject := filepath.Join(e.dir, "reject.json")
	if err := os.WriteFile(reject, []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	swap := func(dir, policy string) func(string) string {
		return func(s string) string {
			s = strings.Replace(s, fmt.Sprintf("registries_conf_dir = %q", e.registriesDir), fmt.Sprintf("registries_conf_dir = %q", dir), 1)
			return strings.Replace(s, fmt.Sprintf("signature_policy = %q", e.policyPath), fmt.Sprintf("signature_policy = %q", policy), 1)
		}
	}

	// Without the drop-in that lets the test registry be reached over
	// plain HTTP, a pull from it fails.
	e.writeConfig(t, swap(empty, e.policyPath))
	info := e.sighup(t)
	image, _ := info.Config["image"].(map[string]any)
	if !containsPrefix(info.LastReload.Applied, "image.registries_conf_dir") || image["registries_conf_dir"] != empty {
		t.Fatalf("reload result %+v, image config %v", info.LastReload, image)
	}
	if _, err := e.tryPull(rpcCtx(t), ti.ref("user-uid"), nil); err == nil {
		t.Fatal("pull over plain HTTP succeeded without the insecure registry drop-in")
	}

	// Back to the drop-in, with a policy that rejects every image.
	e.writeConfig(t, swap(e.registriesDir, reject))
	e.sighup(t)
	if _, err := e.tryPull(rpcCtx(t), ti.ref("user-uid"), nil); err == nil {
		t.Fatal("pull accepted under a policy that rejects everything")
	}

	e.writeConfig(t, nil)
	e.sighup(t)
	e.pullImage(t, ti.ref("user-uid"), nil)
}

// TestReloadCNI moves a running daemon to another CNI conf dir by SIGHUP:
// the network config in use follows, and new pods are set up from the new
// directory even once the old one is empty.
func TestReloadCNI(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	first := e.runPod(t, e.podConfig("first"), "")

	moved := filepath.Join(e.dir, "net2.d")
	if err := os.MkdirAll(moved, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(moved, "20-moved.conflist"), e.cniConfig(), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, func(s string) string {
		return strings.Replace(s, fmt.Sprintf("conf_dir = %q", e.confDir), fmt.Sprintf("conf_dir = %q", moved), 1)
	})
	info := e.sighup(t)
	if !containsPrefix(info.LastReload.Applied, "network.conf_dir") || info.CNIConfig.ConfDir != moved ||
		info.CNIConfig.File != "20-moved.conflist" || info.CNILoadStatus != "OK" {
		t.Fatalf("after moving conf_dir: reload %+v, cni %+v, status %q", info.LastReload, info.CNIConfig, info.CNILoadStatus)
	}
	if err := os.Remove(e.conflistPath()); err != nil {
		t.Fatal(err)
	}
	second := e.runPod(t, e.podConfig("second"), "")
	st, _ := e.status(t, second)
	e.requireIPInSubnet(t, podIP(st))
	// The pod set up from the old directory is torn down as before.
	e.stopAndRemove(t, first, second)
}
