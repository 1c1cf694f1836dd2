package specgen

import (
	"errors"
	"slices"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestCRIMountOptions(t *testing.T) {
	m, err := criMount(Mount{HostPath: "/data", ContainerPath: "/d", Readonly: true, Options: []string{"noexec", "nodev", "nosuid", "noexec"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"rbind", "rprivate", "ro", "noexec", "nodev", "nosuid"}
	if !slices.Equal(m.Options, want) {
		t.Errorf("options %v, want %v", m.Options, want)
	}
	for _, bad := range []string{"rw", "exec", "dev", "suid", "rshared", "bind", "size=1m", ""} {
		if _, err := criMount(Mount{HostPath: "/data", ContainerPath: "/d", Readonly: true, Options: []string{bad}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("option %q: err %v, want InvalidArgument", bad, err)
		}
		if err := CheckMountOptions([]string{"noexec", bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckMountOptions %q: err %v, want InvalidArgument", bad, err)
		}
	}
	if err := CheckMountOptions(MountOptionsAllowed); err != nil {
		t.Errorf("the allowed options: %v", err)
	}
}
