package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The printed configuration (podbayd config) loads back into the same
// configuration, defaults and derived values included.
func TestEncodeRoundTrip(t *testing.T) {
	cfg := Default()
	cfg.MetricsAddress = "127.0.0.1:9090"
	cfg.Image.DriverOptions = []string{"overlay.mountopt=nodev,metacopy=on"}
	cfg.Runtimes["kata"] = Runtime{Type: TypeVM, Path: "/usr/bin/containerd-shim-kata-v2",
		ConfigPath: "/etc/kata/configuration.toml", Timeout: Duration(3 * time.Minute),
		PodAnnotations: []string{"io.katacontainers.*"}, ContainerAnnotations: []string{}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := cfg.Encode(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`sandbox_timeout = "4m0s"`, "[network]", "[runtimes.kata]", `pod_annotations = ["io.katacontainers.*"]`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, b.String())
		}
	}
	path := filepath.Join(t.TempDir(), "podbay.toml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path, false)
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, b.String())
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip changed the configuration:\n got %+v\nwant %+v", back, cfg)
	}
	if d := Diff(cfg, back); len(d) != 0 {
		t.Errorf("Diff after round trip: %v", d)
	}

	m, err := cfg.Map()
	if err != nil {
		t.Fatal(err)
	}
	network, _ := m["network"].(map[string]any)
	if m["log_level"] != "info" || network["conf_dir"] != "/etc/cni/net.d" {
		t.Errorf("Map keys are not the file's: %v", m)
	}
}

func TestClone(t *testing.T) {
	cfg := Default()
	runc := cfg.Runtimes["runc"]
	runc.PodAnnotations = []string{"example.com/*"}
	cfg.Runtimes["runc"] = runc
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := cfg.Clone()
	c.Network.PluginDirs[0] = "/x"
	rt := c.Runtimes["runc"]
	rt.PodAnnotations[0] = "x"
	c.Runtimes["new"] = Runtime{}
	if cfg.Network.PluginDirs[0] == "/x" || cfg.Runtimes["runc"].PodAnnotations[0] == "x" || len(cfg.Runtimes) != 2 {
		t.Errorf("Clone shares memory with the original: %+v", cfg)
	}
}

func TestDiff(t *testing.T) {
	a := Default()
	b := a.Clone()
	b.LogLevel = "debug"
	b.Root = "/srv/podbay"
	b.Network.PluginDirs = []string{"/opt/cni/bin"}
	b.Network.CacheDir = "/srv/cni"
	b.Image.SignaturePolicy = "/etc/podbay/policy.json"
	b.StreamPort = 10010
	delete(b.Runtimes, "crun")
	b.Runtimes["kata"] = Runtime{Type: TypeVM, Path: "containerd-shim-kata-v2"}
	rc := b.Runtimes["runc"]
	rc.Path = "/usr/local/bin/runc"
	rc.Timeout = Duration(time.Minute)
	b.Runtimes["runc"] = rc

	got := map[string]Change{}
	var keys []string
	for _, c := range Diff(a, b) {
		got[c.Key] = c
		keys = append(keys, c.Key)
	}
	want := []string{"image.signature_policy", "log_level", "network.cache_dir", "network.plugin_dirs", "root",
		"runtimes.crun", "runtimes.kata", "runtimes.runc.path", "runtimes.runc.timeout", "stream_port"}
	if !slices.Equal(keys, want) {
		t.Fatalf("changed keys %q, want %q", keys, want)
	}
	for key, live := range map[string]bool{
		"image.signature_policy": true, "log_level": true, "network.plugin_dirs": true, "runtimes.crun": true,
		"runtimes.runc.path": true, "network.cache_dir": false, "root": false, "stream_port": false,
	} {
		if got[key].Live != live {
			t.Errorf("%s: live %v, want %v", key, got[key].Live, live)
		}
	}
	if c := got["runtimes.crun"]; c.Op != ChangeRemoved || c.String() != "runtimes.crun removed" {
		t.Errorf("removed handler: %+v", c)
	}
	if c := got["runtimes.kata"]; c.Op != ChangeAdded {
		t.Errorf("added handler: %+v", c)
	}
	if c := got["log_level"]; c.String() != `log_level "info" -> "debug"` {
		t.Errorf("log_level change reads %q", c)
	}
	if c := got["runtimes.runc.timeout"]; c.Old != `"0s"` || c.New != `"1m0s"` {
		t.Errorf("duration change %+v", c)
	}
	if c := got["network.plugin_dirs"]; c.New != `["/opt/cni/bin"]` {
		t.Errorf("list change %+v", c)
	}
}

func TestPlanReload(t *testing.T) {
	running := Default()
	next := running.Clone()
	next.LogLevel = "debug"
	next.State = "/run/other"         // needs a restart
	next.Listen = "/run/other/x.sock" // needs a restart
	next.Network.ConfDir = "/etc/podbay/net.d"
	next.SandboxProcess = SandboxProcessAlways // live: new pods
	plan, err := PlanReload(running, next)
	if err != nil {
		t.Fatal(err)
	}
	var restart []string
	for _, c := range plan.Restart {
		restart = append(restart, c.Key)
	}
	if !slices.Equal(restart, []string{"listen", "state"}) {
		t.Errorf("restart needed for %q, want listen and state", restart)
	}
	c := plan.Config
	if c.LogLevel != "debug" || c.Network.ConfDir != "/etc/podbay/net.d" || c.SandboxProcess != SandboxProcessAlways {
		t.Errorf("live keys not taken: %+v", c)
	}
	if c.State != "/run/podbay" || c.Listen != "/run/podbay/podbay.sock" {
		t.Errorf("keys needing a restart changed: state %q listen %q", c.State, c.Listen)
	}
	// Derived from state: stays as the running daemon has it.
	if c.Runtimes["runc"].Root != "/run/podbay/runtimes/runc" || c.Image.RunRoot != "/run/podbay/storage" {
		t.Errorf("derived values follow the new state: %+v %q", c.Runtimes["runc"], c.Image.RunRoot)
	}
	if next.State != "/run/other" || running.State != "/run/podbay" {
		t.Error("PlanReload changed its arguments")
	}

	badProcess := running.Clone()
	badProcess.SandboxProcess = "never"
	if _, err := PlanReload(running, badProcess); err == nil || !strings.Contains(err.Error(), "sandbox_process") {
		t.Errorf("invalid sandbox_process planned: %v", err)
	}
	bad := running.Clone()
	bad.LogLevel = "loud"
	if _, err := PlanReload(running, bad); err == nil || !strings.Contains(err.Error(), "log_level") {
		t.Errorf("invalid configuration planned: %v", err)
	}
	badRestart := running.Clone()
	badRestart.Root = "relative"
	if _, err := PlanReload(running, badRestart); err == nil {
		t.Error("a configuration that would not start was planned")
	}
}

func TestEnvConventions(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.toml")
	t.Setenv(EnvRegistriesConf, "/env/registries.conf")
	t.Setenv(EnvRegistriesConfLegacy, "/legacy/registries.conf")
	t.Setenv(EnvPolicy, "/env/policy.json")
	cfg, err := Load(missing, true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Image.RegistriesConf != "/env/registries.conf" || cfg.Image.SignaturePolicy != "/env/policy.json" {
		t.Errorf("environment not used without a file: %+v", cfg.Image)
	}

	path := filepath.Join(dir, "podbay.toml")
	os.WriteFile(path, []byte("[image]\nregistries_conf = \"/file/registries.conf\"\nsignature_policy = \"/file/policy.json\"\n"), 0o644)
	if cfg, err = Load(path, false); err != nil {
		t.Fatal(err)
	}
	if cfg.Image.RegistriesConf != "/file/registries.conf" || cfg.Image.SignaturePolicy != "/file/policy.json" {
		t.Errorf("environment overrode the file: %+v", cfg.Image)
	}

	os.Unsetenv(EnvRegistriesConf)
	os.WriteFile(path, []byte("log_level = \"info\"\n"), 0o644)
	if cfg, err = Load(path, false); err != nil {
		t.Fatal(err)
	}
	if cfg.Image.RegistriesConf != "/legacy/registries.conf" {
		t.Errorf("REGISTRIES_CONFIG_PATH not used after CONTAINERS_REGISTRIES_CONF: %q", cfg.Image.RegistriesConf)
	}
}
