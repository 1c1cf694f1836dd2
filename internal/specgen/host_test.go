package specgen

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestBoundingSet(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         []string // nil: an error
	}{
		{"full 5.9+ set", "Name:\tx\nCapBnd:\t000001ffffffffff\n", knownCapabilities},
		{"without CAP_SYS_RESOURCE", "CapBnd:\t000001fffeffffff\n", without(knownCapabilities, "CAP_SYS_RESOURCE")},
		{"bits the package does not know are left out", "CapBnd:\tffffffffffffffff\n", knownCapabilities},
		{"a few", "CapEff:\t0000000000000000\nCapBnd:\t0000000000000021\n", []string{"CAP_CHOWN", "CAP_KILL"}},
		{"none", "CapBnd:\t0000000000000000\n", []string{}},
		{"no line", "Name:\tx\n", nil},
		{"garbage", "CapBnd:\tzz\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := boundingSet(tc.status)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("boundingSet = %v, want an error", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) || got == nil {
				t.Fatalf("boundingSet = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestCurrentCapabilities(t *testing.T) {
	caps, err := CurrentCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		if !slices.Contains(knownCapabilities, c) {
			t.Errorf("unknown capability %s", c)
		}
	}
}

func TestDeviceFromHost(t *testing.T) {
	devs, err := DeviceFromHost("/dev/null", "/dev/mynull", "rw")
	if err != nil {
		t.Fatal(err)
	}
	want := Device{ContainerPath: "/dev/mynull", Type: "c", Major: 1, Minor: 3, FileMode: 0o666, Permissions: "rw"}
	if len(devs) != 1 || devs[0] != want {
		t.Fatalf("devices %+v, want %+v", devs, want)
	}

	dir := t.TempDir()
	if err := os.Symlink("/dev/null", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/plain", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if devs, err := DeviceFromHost(dir+"/link", "/dev/n", ""); err != nil || len(devs) != 1 || devs[0].Major != 1 {
		t.Fatalf("a symlink to a device: %+v, %v", devs, err)
	}
	// Inside a directory, symlinks and plain files are not devices.
	if devs, err := DeviceFromHost(dir, "/dev/d", "rwm"); err != nil || len(devs) != 0 {
		t.Fatalf("directory without devices: %+v, %v", devs, err)
	}
	if _, err := DeviceFromHost(dir+"/plain", "/dev/p", "rwm"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("regular file: %v, want an invalid argument", err)
	}
	if _, err := DeviceFromHost(dir+"/missing", "/dev/m", "rwm"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want not exist", err)
	}
}

func TestHostDevices(t *testing.T) {
	devs, err := HostDevices()
	if err != nil {
		t.Fatal(err)
	}
	var null bool
	for _, d := range devs {
		if d.ContainerPath == "/dev/null" && d.Type == "c" && d.Major == 1 && d.Minor == 3 {
			null = true
		}
		if d.ContainerPath == "/dev/console" || strings.HasPrefix(d.ContainerPath, "/dev/pts/") {
			t.Errorf("host devices include %s", d.ContainerPath)
		}
	}
	if !null {
		t.Errorf("host devices %+v lack /dev/null", devs)
	}
	if _, _, err := devices(nil, true, devs); err != nil {
		t.Fatalf("host devices do not make a spec: %v", err)
	}
}

func TestCheckSysctlsExist(t *testing.T) {
	procSys := t.TempDir()
	for _, f := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/default/forwarding", "net/ipv4/conf/eth0.100/forwarding", "kernel/shmmax"} {
		if err := os.MkdirAll(filepath.Join(procSys, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(procSys, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"net.ipv4.ip_forward", true},
		{"net/ipv4/ip_forward", true},
		{"kernel.shmmax", true},
		{"net.ipv4.conf.eth0/100.forwarding", true},
		{"net/ipv4/conf/eth0.100/forwarding", true},
		{"net.ipv4.conf.pod0.forwarding", true}, // an interface only the pod has
		{"net.ipv4.conf.pod0.nope", false},
		{"net.ipv4.nope", false},
		{"net.ipv4", false}, // a directory
		{"net..ipv4.ip_forward", false},
		{"net.ipv4.conf.//.ipv4.ip_forward", false},
	} {
		err := checkSysctlsExist(map[string]string{tc.name: "1"}, procSys)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("%s: %v, want ok=%v or an invalid argument", tc.name, err, tc.ok)
		}
	}
}
