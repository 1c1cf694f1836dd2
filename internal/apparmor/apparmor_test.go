package apparmor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	bare, err := Generate("p1", dir, "unconfined")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"@{PROC}=/proc/\n", "profile p1 flags=(attach_disconnected,mediate_deleted) {",
		"signal (receive) peer=unconfined,", "signal (send,receive) peer=p1,", "deny mount,", "deny @{PROC}/sysrq-trigger rwklx,"} {
		if !strings.Contains(string(bare), want) {
			t.Errorf("profile without includes lacks %q:\n%s", want, bare)
		}
	}
	for _, unwanted := range []string{"#include", "abi <"} {
		if strings.Contains(string(bare), unwanted) {
			t.Errorf("profile without includes has %q", unwanted)
		}
	}
	for _, f := range []string{"abi/3.0", "tunables/global", "abstractions/base"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full, err := Generate("p1", dir, "podbayd")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"abi <abi/3.0>,\n", "#include <tunables/global>\n", "  #include <abstractions/base>\n", "peer=podbayd,"} {
		if !strings.Contains(string(full), want) {
			t.Errorf("profile with includes lacks %q:\n%s", want, full)
		}
	}
	if strings.Contains(string(full), "@{PROC}=/proc/") {
		t.Error("profile with tunables/global defines @{PROC} itself")
	}
}

func TestHasProfile(t *testing.T) {
	list := "cri-validate-apparmor-test-deny-write (enforce)\npodbay-default (enforce)\n/usr/bin/man (complain)\n"
	for name, want := range map[string]bool{"podbay-default": true, "/usr/bin/man": true, "podbay": false, "cri-validate": false} {
		if got, err := hasProfile(strings.NewReader(list), name); err != nil || got != want {
			t.Errorf("hasProfile(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
}

// On a host with AppArmor and apparmor_parser the profile loads, and
// parses; elsewhere (this project's CI VM) the test says why it skips.
func TestEnsureDefaultLoads(t *testing.T) {
	if os.Geteuid() != 0 || !HostSupports() {
		t.Skip("needs root, AppArmor in the kernel and apparmor_parser")
	}
	l := &Loader{Dir: t.TempDir()}
	if err := l.EnsureDefault(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, err := Loaded(DefaultProfile); err != nil || !ok {
		t.Fatalf("Loaded(%s) = %v, %v after EnsureDefault", DefaultProfile, ok, err)
	}
}
