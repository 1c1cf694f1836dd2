package server

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/specgen"
)

func TestSecurityProfiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *runtimeapi.SecurityProfile
		want specgen.ProfileType
	}{
		{"none is unconfined", nil, specgen.ProfileUnconfined},
		{"runtime default", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, specgen.ProfileRuntimeDefault},
		{"unconfined", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, specgen.ProfileUnconfined},
	} {
		got, err := seccompProfile(tc.in)
		if err != nil || got.Type != tc.want {
			t.Errorf("seccomp %s: %v %v, want %v", tc.name, got.Type, err, tc.want)
		}
	}
	if _, err := seccompProfile(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "relative.json"}); err == nil {
		t.Error("relative localhost seccomp profile accepted")
	}
}

// AppArmor: the field, else the deprecated string, else the runtime
// default, as containerd does.
func TestAppArmorProfiles(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sc        *runtimeapi.LinuxContainerSecurityContext
		want      specgen.ProfileType
		localhost string
		bad       bool
	}{
		{name: "nothing is the runtime default", sc: nil, want: specgen.ProfileRuntimeDefault},
		{name: "field: runtime default", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}, want: specgen.ProfileRuntimeDefault},
		{name: "field: unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}, want: specgen.ProfileUnconfined},
		{name: "field: localhost", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/p1"}}, want: specgen.ProfileLocalhost, localhost: "p1"},
		{name: "field wins over the string", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/old", Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}, want: specgen.ProfileUnconfined},
		{name: "string: runtime/default", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "runtime/default"}, want: specgen.ProfileRuntimeDefault},
		{name: "string: unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "unconfined"}, want: specgen.ProfileUnconfined},
		{name: "string: localhost", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/p2"}, want: specgen.ProfileLocalhost, localhost: "p2"},
		{name: "string: other", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "p3"}, bad: true},
	} {
		got, err := appArmorProfile(tc.sc)
		if tc.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: %+v, %v; want InvalidArgument", tc.name, got, err)
			}
			continue
		}
		if err != nil || got.Type != tc.want || got.Localhost != tc.localhost {
			t.Errorf("%s: %+v, %v; want type %v localhost %q", tc.name, got, err, tc.want, tc.localhost)
		}
	}
}

func TestValidateContainerConfig(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "busybox"}
	md := &runtimeapi.ContainerMetadata{Name: "c"}
	sc := func(s *runtimeapi.LinuxContainerSecurityContext) *runtimeapi.LinuxContainerConfig {
		return &runtimeapi.LinuxContainerConfig{SecurityContext: s}
	}
	for _, tc := range []struct {
		name string
		cfg  *runtimeapi.ContainerConfig
		ok   bool
	}{
		{"nil", nil, false},
		{"no metadata", &runtimeapi.ContainerConfig{Image: img}, false},
		{"no image", &runtimeapi.ContainerConfig{Metadata: md}, false},
		{"absolute log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "/etc/x"}, false},
		{"escaping log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "../x"}, false},
		{"log path is the log dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "."}, false},
		{"log path is a dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "c/"}, false},
		{"group without user", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}})}, false},
		{"group with user", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}, RunAsUser: &runtimeapi.Int64Value{Value: 1}})}, true},
		{"group with username", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: sc(&runtimeapi.LinuxContainerSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 1}, RunAsUsername: "www-data"})}, true},
		{"plain", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "c/0.log"}, true},
		// What runc or conmon would refuse after the container's storage
		// is made (found by TestCRIFuzz).
		{"NUL in the log path", &runtimeapi.ContainerConfig{Metadata: md, Image: img, LogPath: "a\x00b"}, false},
		{"empty program name", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Command: []string{""}}, false},
		{"NUL in an arg", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Args: []string{"a\x00b"}}, false},
		{"NUL in an env value", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("\x00")}}}, false},
		{"env value not UTF-8", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte{0xff, 'a'}}}}, false},
		{"env value UTF-8 bytes", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("é=x")}}}, true},
		{"relative working dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, WorkingDir: "work"}, false},
		{"absolute working dir", &runtimeapi.ContainerConfig{Metadata: md, Image: img, WorkingDir: "/work"}, true},
		{"cpu shares out of range", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1 << 31}}}, false},
		{"memory limit too low", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 65536}}}, false},
		{"resources", &runtimeapi.ContainerConfig{Metadata: md, Image: img, Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}}}, true},
	} {
		if err := validateContainerConfig(tc.cfg); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

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
		_, err := seccompProfile(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: path})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("profile %s: %v, want InvalidArgument", path, err)
		}
	}
	p, err := seccompProfile(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: good})
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
