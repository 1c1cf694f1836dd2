package runtime

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

type fakeUnits struct{ stopped []string }

func (f *fakeUnits) StopUnit(_ context.Context, unit string) error {
	f.stopped = append(f.stopped, unit)
	return nil
}

// TestRemoveSpecCgroupSystemd: a systemd cgroupsPath's scope is stopped
// through the unit stopper, not looked for in cgroupfs.
func TestRemoveSpecCgroupSystemd(t *testing.T) {
	bundle := t.TempDir()
	spec := &specs.Spec{Linux: &specs.Linux{CgroupsPath: "kubepods-besteffort-pod1.slice:podbay:abc"}}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	units := &fakeUnits{}
	if err := RemoveSpecCgroup(context.Background(), bundle, units); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(units.stopped, []string{"podbay-abc.scope"}) {
		t.Errorf("stopped %v, want podbay-abc.scope", units.stopped)
	}
	// Without a stopper (the cgroupfs driver's runtimes) it is left alone.
	if err := RemoveSpecCgroup(context.Background(), bundle, nil); err != nil {
		t.Fatal(err)
	}
	// A bundle that is gone counts as done.
	if err := RemoveSpecCgroup(context.Background(), filepath.Join(bundle, "gone"), units); err != nil || len(units.stopped) != 1 {
		t.Errorf("gone bundle: %v, stopped %v", err, units.stopped)
	}
}
