package shim

import (
	"encoding/json"
	"testing"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

func TestRuncOptions(t *testing.T) {
	a, err := RuncOptions("/usr/sbin/runc", "/run/podbay/runc")
	if err != nil {
		t.Fatal(err)
	}
	// containerd's typeurl: the full name, no type.googleapis.com/ prefix.
	if a.TypeUrl != "containerd.runc.v1.Options" {
		t.Errorf("type URL %q", a.TypeUrl)
	}
	var o runcoptions.Options
	if err := proto.Unmarshal(a.Value, &o); err != nil {
		t.Fatal(err)
	}
	if o.BinaryName != "/usr/sbin/runc" || o.Root != "/run/podbay/runc" {
		t.Errorf("options %+v", &o)
	}
}

func TestConfigPathOptions(t *testing.T) {
	for _, tc := range []struct{ path, typeURL string }{
		{"/etc/kata/configuration.toml", ""},
		// gVisor's shim decodes these options as runtimeoptions.v1.Options
		// too; containerd users set TypeUrl to runsc's.
		{"/etc/podbay/runsc.toml", "io.containerd.runsc.v1.options"},
	} {
		a, err := ConfigPathOptions(tc.path, tc.typeURL)
		if err != nil {
			t.Fatal(err)
		}
		if a.TypeUrl != "runtimeoptions.v1.Options" {
			t.Errorf("type URL %q", a.TypeUrl)
		}
		var o runtimeoptions.Options
		if err := proto.Unmarshal(a.Value, &o); err != nil {
			t.Fatal(err)
		}
		if o.ConfigPath != tc.path || o.TypeUrl != tc.typeURL {
			t.Errorf("options %+v", &o)
		}
	}
}

func TestProcessAny(t *testing.T) {
	a, err := processAny(&specs.Process{Args: []string{"sh"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if a.TypeUrl != "types.containerd.io/opencontainers/runtime-spec/1/Process" {
		t.Errorf("type URL %q", a.TypeUrl)
	}
	var p specs.Process
	if err := json.Unmarshal(a.Value, &p); err != nil || len(p.Args) != 1 || p.Args[0] != "sh" {
		t.Errorf("value %s: %v", a.Value, err)
	}
}

func TestPodOf(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{nil, "c1"},
		{map[string]string{annotationContainerType: "sandbox", annotationSandboxID: "c1"}, "c1"},
		{map[string]string{annotationContainerType: "container", annotationSandboxID: "pod"}, "pod"},
		{map[string]string{annotationSandboxID: "pod"}, "pod"},
		{map[string]string{annotationContainerType: "container"}, "c1"},
	} {
		if got := podOf("c1", tc.annotations); got != tc.want {
			t.Errorf("podOf(%v) = %q, want %q", tc.annotations, got, tc.want)
		}
	}
}
