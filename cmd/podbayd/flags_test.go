package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/podbay/podbay/internal/config"
)

// `podbayd config` prints defaults, file and flags merged; the output,
// used as the configuration file, gives the same configuration.
func TestPrintConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "podbay.toml")
	if err := os.WriteFile(path, []byte(`
log_level = "warn"
default_runtime = "kata"
[network]
default_subnet = "10.5.0.0/16"
[runtimes.kata]
type = "vm"
path = "/usr/bin/containerd-shim-kata-v2"
pod_annotations = ["io.katacontainers.*"]
[runtimes.runc]
path = "/usr/sbin/runc"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path, "--log-level", "debug", "--stream-port", "10010", "--cni-plugin-dirs", "/a,/b"}
	var out bytes.Buffer
	if err := printConfig(&out, args); err != nil {
		t.Fatal(err)
	}
	_, want, err := parseFlags("podbayd", args).loadValid()
	if err != nil {
		t.Fatal(err)
	}
	if want.LogLevel != "debug" || want.StreamPort != 10010 || want.Network.DefaultSubnet != "10.5.0.0/16" ||
		!reflect.DeepEqual(want.Network.PluginDirs, []string{"/a", "/b"}) || want.Runtimes["kata"].Type != config.TypeVM {
		t.Fatalf("file and flags not merged: %+v", want)
	}
	printed := filepath.Join(dir, "printed.toml")
	if err := os.WriteFile(printed, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, got, err := parseFlags("podbayd", []string{"--config", printed}).loadValid()
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, out.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("printed configuration loads differently:\n got %+v\nwant %+v\n%s", got, want, out.String())
	}

	if err := printConfig(&out, []string{"--config", filepath.Join(dir, "missing.toml")}); err == nil {
		t.Error("a missing --config file printed")
	}
	os.WriteFile(path, []byte("log_level = \"loud\"\n"), 0o644)
	if err := printConfig(&out, []string{"--config", path}); err == nil {
		t.Error("an invalid configuration printed")
	}
}
