package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"

	"github.com/podbay/podbay/internal/errdefs"
)

// runc's refusal to start the program an exec names is the request's
// fault, through conmon or a shim alike.
func TestClassifyExec(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{errors.New(`exec in container c1: runtime exec: exec failed: unable to start container process: exec: "..": executable file not found in $PATH (exit status 255)`), codes.InvalidArgument},
		{errors.New(`exec in container c1: OCI runtime exec failed: exec failed: unable to start container process: exec: "/nonexistent": stat /nonexistent: no such file or directory: unknown`), codes.InvalidArgument},
		{errors.New(`exec in container c1: runtime exec: exec failed: unable to start container process: exec: "../../../etc": permission denied (exit status 255)`), codes.InvalidArgument},
		{errors.New(`exec in container c1: runtime exec: exec failed: unable to start container process: error adding pid 42 to cgroups (exit status 255)`), codes.Unknown},
		{errors.New(`exec in container c1: start runtime exec: fork/exec /usr/bin/runc: no such file or directory`), codes.Unknown},
		// A class the runtime gave already stays.
		{fmt.Errorf(`container c1 is gone: unable to start container process: exec: "x": %w`, errdefs.ErrNotFound), codes.NotFound},
		{nil, codes.OK},
	} {
		got := ClassifyExec(tc.err)
		if errdefs.Code(got) != tc.want || (tc.err != nil && (!errors.Is(got, tc.err) || got.Error() != tc.err.Error()+suffix(tc.want))) {
			t.Errorf("ClassifyExec(%v) = %v (%v), want %v", tc.err, got, errdefs.Code(got), tc.want)
		}
	}
}

// suffix is what ClassifyExec adds to the message of an error it
// classifies.
func suffix(c codes.Code) string {
	if c == codes.InvalidArgument {
		return ": " + errdefs.ErrInvalidArgument.Error()
	}
	return ""
}

// A sysctl value out of the kernel's range is known only when the runtime
// writes it: its refusal is the client's error.
func TestClassifyCreate(t *testing.T) {
	sysctls := map[string]string{"net.ipv4.ip_unprivileged_port_start": "-1", "kernel.shm_rmid_forced": "1", "net.ipv4.conf.eth0/100.forwarding": "1"}
	bundle := t.TempDir()
	b, err := json.Marshal(&specs.Spec{Linux: &specs.Linux{Sysctl: sysctls}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		msg, want string
	}{
		{"runc create failed: unable to start container process: error during container init: write /proc/sys/net/ipv4/ip_unprivileged_port_start: invalid argument",
			"net.ipv4.ip_unprivileged_port_start"},
		{"OCI runtime create failed: runc create failed: ... open /proc/sys/kernel/shm_rmid_forced: no such file or directory", "kernel.shm_rmid_forced"},
		{"runc create failed: write /proc/sys/net/ipv4/conf/eth0.100/forwarding: invalid argument", "net.ipv4.conf.eth0/100.forwarding"},
		{"runc create failed: write /proc/sys/net/ipv4/conf/eth0/100/forwarding: invalid argument", "net.ipv4.conf.eth0/100.forwarding"},
		{"runc create failed: write /proc/sys/net/ipv4/ip_forward: invalid argument", ""}, // not requested
		{"runc create failed: the maximum allowed cpu-shares is 262144", ""},
	} {
		in := errors.New(tc.msg)
		got := ClassifyCreate(in, bundle)
		var se *SysctlError
		switch {
		case tc.want == "" && got != in:
			t.Errorf("%q: %v, want it unchanged", tc.msg, got)
		case tc.want != "" && (!errors.As(got, &se) || se.Name != tc.want || se.Value != sysctls[tc.want] ||
			errdefs.Code(got) != codes.InvalidArgument || !errors.Is(got, in) ||
			!strings.Contains(got.Error(), "the kernel refused sysctl "+tc.want+"=") || !strings.Contains(got.Error(), tc.msg)):
			t.Errorf("%q: %v, want a refusal of %s", tc.msg, got, tc.want)
		}
	}
	// Without a readable spec, or without an error, nothing to classify.
	in := errors.New("write /proc/sys/kernel/shm_rmid_forced: invalid argument")
	if got := ClassifyCreate(in, t.TempDir()); got != in {
		t.Errorf("no spec: %v", got)
	}
	if got := ClassifyCreate(nil, bundle); got != nil {
		t.Errorf("nil: %v", got)
	}
}
