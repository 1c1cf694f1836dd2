package server

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/specgen"
)

// A Localhost seccomp profile must be a regular file of bounded size: a
// FIFO would block the daemon, a device such as /dev/zero exhaust it.
func TestSeccompProfileMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, maxSeccompProfile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "profile.json")
	if err := os.WriteFile(good, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero", big, dir, filepath.Join(dir, "missing")} {
		_, err := seccompProfile(podrequest.Seccomp{Type: specgen.ProfileLocalhost, LocalhostRef: path})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("profile %s: %v, want InvalidArgument", path, err)
		}
	}
	p, err := seccompProfile(podrequest.Seccomp{Type: specgen.ProfileLocalhost, LocalhostRef: good})
	if err != nil || string(p.Localhost) != `{"defaultAction":"SCMP_ACT_ALLOW"}` {
		t.Errorf("regular profile: %q, %v", p.Localhost, err)
	}
}

// Each DNS server, search domain and option is one word: a newline or
// space would write lines into the pod's resolv.conf.
func TestResolvConfRefusesInjectedLines(t *testing.T) {
	for _, dns := range []*network.DNS{
		{Servers: []string{"10.0.0.10\nnameserver 6.6.6.6"}},
		{Searches: []string{"svc.cluster.local evil.example"}},
		{Options: []string{"ndots:5\x00"}},
		{Servers: []string{""}},
	} {
		if _, err := resolvConf(dns); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("resolvConf(%q): %v, want InvalidArgument", dns, err)
		}
	}
	b, err := resolvConf(&network.DNS{Servers: []string{"10.0.0.10"}, Searches: []string{"a.local", "b.local"}, Options: []string{"ndots:5"}})
	if err != nil || string(b) != "search a.local b.local\nnameserver 10.0.0.10\noptions ndots:5\n" {
		t.Errorf("resolvConf = %q, %v", b, err)
	}
}
