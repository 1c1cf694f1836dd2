package sandbox

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/network"
)

// oldRecord is Record as podbay wrote it before phases (format version 1).
type oldRecord struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	Metadata         Metadata          `json:"metadata"`
	State            State             `json:"state"`
	CreatedAt        time.Time         `json:"createdAt"`
	RuntimeHandler   string            `json:"runtimeHandler"`
	NetworkMode      string            `json:"networkMode"`
	NetworkOrder     string            `json:"networkOrder"`
	Namespaces       Namespaces        `json:"namespaces"`
	Labels           map[string]string `json:"labels,omitempty"`
	Annotations      map[string]string `json:"annotations,omitempty"`
	CgroupParent     string            `json:"cgroupParent,omitempty"`
	Image            string            `json:"image,omitempty"`
	Dir              string            `json:"dir"`
	Pid              int               `json:"pid,omitempty"`
	ContainerCreated bool              `json:"containerCreated,omitempty"`
	NetworkSettings  network.Settings  `json:"networkSettings"`
	NetworkSetup     bool              `json:"networkSetup,omitempty"`
	NetworkStopped   bool              `json:"networkStopped,omitempty"`
	Stopping         bool              `json:"stopping,omitempty"`
	Removing         bool              `json:"removing,omitempty"`
	Config           json.RawMessage   `json:"config,omitempty"`
}

func oldBase(mode string) oldRecord {
	r := oldRecord{
		ID: "sb1", Name: "k8s_POD_web_default_u1_0",
		Metadata:  Metadata{Name: "web", Namespace: "default", UID: "u1"},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), RuntimeHandler: "runc",
		NetworkMode: mode, NetworkOrder: "before",
		Namespaces:   Namespaces{Network: NamespacePod, PID: NamespaceContainer, IPC: NamespacePod},
		Labels:       map[string]string{"app": "web"},
		CgroupParent: "/podbay", Image: "pause", Dir: "/var/lib/podbay/sandboxes/sb1", Pid: 42,
		Config: json.RawMessage(`{"metadata":{"name":"web"}}`),
	}
	r.NetworkSettings.SandboxID = "sb1"
	if mode == ModeCNI {
		r.NetworkSettings.SandboxKey = "/var/run/netns/podbay-sb1"
	}
	return r
}

// TestDecodeOldRecords reads every combination of the old fields that the
// old code could write, for both network orders and both network modes.
func TestDecodeOldRecords(t *testing.T) {
	type old struct {
		state                                         State
		ctr, netSetup, netStopped, stopping, removing bool
	}
	for _, tc := range []struct {
		name  string
		mode  string
		old   old
		phase Phase
		net   NetworkPhase
	}{
		// RunPodSandbox, network before the pause container starts.
		{"creating", ModeCNI, old{state: StateCreating}, PhaseCreating, NetworkNone},
		{"creating, ADD issued", ModeCNI, old{state: StateCreating, netSetup: true}, PhaseCreating, NetworkAttached},
		{"creating, ADD then create", ModeCNI, old{state: StateCreating, netSetup: true, ctr: true}, PhaseCreating, NetworkAttached},
		// Network after start.
		{"creating, create", ModeCNI, old{state: StateCreating, ctr: true}, PhaseCreating, NetworkNone},
		{"ready", ModeCNI, old{state: StateReady, ctr: true, netSetup: true}, PhaseReady, NetworkAttached},
		{"pause exited", ModeCNI, old{state: StateNotReady, ctr: true, netSetup: true}, PhaseExited, NetworkAttached},
		{"stop began", ModeCNI, old{state: StateNotReady, ctr: true, netSetup: true, stopping: true}, PhaseStopping, NetworkAttached},
		{"stop released the network", ModeCNI, old{state: StateNotReady, ctr: true, netStopped: true, stopping: true}, PhaseStopping, NetworkReleased},
		{"stopped", ModeCNI, old{state: StateNotReady, ctr: true, netStopped: true}, PhaseStopped, NetworkReleased},
		{"remove of a ready pod began", ModeCNI, old{state: StateReady, ctr: true, netSetup: true, removing: true}, PhaseRemoving, NetworkAttached},
		{"remove of an exited pod began", ModeCNI, old{state: StateNotReady, ctr: true, netSetup: true, removing: true}, PhaseRemoving, NetworkAttached},
		{"remove stopping", ModeCNI, old{state: StateNotReady, ctr: true, netSetup: true, stopping: true, removing: true}, PhaseRemoving, NetworkAttached},
		{"remove stopping, network released", ModeCNI, old{state: StateNotReady, ctr: true, netStopped: true, stopping: true, removing: true}, PhaseRemoving, NetworkReleased},
		{"remove after stop", ModeCNI, old{state: StateNotReady, ctr: true, netStopped: true, removing: true}, PhaseRemoving, NetworkReleased},

		{"host: creating", ModeHost, old{state: StateCreating}, PhaseCreating, NetworkNone},
		{"host: creating, create", ModeHost, old{state: StateCreating, ctr: true}, PhaseCreating, NetworkNone},
		{"host: ready", ModeHost, old{state: StateReady, ctr: true}, PhaseReady, NetworkNone},
		// Stopped or exited: the old fields do not tell; exited makes a
		// Stop run its idempotent steps once more.
		{"host: notready", ModeHost, old{state: StateNotReady, ctr: true}, PhaseExited, NetworkNone},
		{"host: stop began", ModeHost, old{state: StateNotReady, ctr: true, stopping: true}, PhaseStopping, NetworkNone},
		{"host: remove of a ready pod began", ModeHost, old{state: StateReady, ctr: true, removing: true}, PhaseRemoving, NetworkNone},
		{"host: remove stopping", ModeHost, old{state: StateNotReady, ctr: true, stopping: true, removing: true}, PhaseRemoving, NetworkNone},
		{"host: remove after stop", ModeHost, old{state: StateNotReady, ctr: true, removing: true}, PhaseRemoving, NetworkNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := oldBase(tc.mode)
			o.State, o.ContainerCreated, o.NetworkSetup = tc.old.state, tc.old.ctr, tc.old.netSetup
			o.NetworkStopped, o.Stopping, o.Removing = tc.old.netStopped, tc.old.stopping, tc.old.removing
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			want := Record{
				ID: o.ID, Name: o.Name, Metadata: o.Metadata, Phase: tc.phase, CreatedAt: o.CreatedAt,
				RuntimeHandler: o.RuntimeHandler, NetworkMode: o.NetworkMode, NetworkOrder: o.NetworkOrder,
				Namespaces: o.Namespaces, Labels: o.Labels, CgroupParent: o.CgroupParent, Image: o.Image,
				Dir: o.Dir, Pid: o.Pid, ContainerCreated: o.ContainerCreated, Network: tc.net,
				NetworkSettings: o.NetworkSettings, Config: o.Config,
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded\n %+v\nwant\n %+v", got, want)
			}
			if err := got.consistent(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDecodeRefusesUnknownState(t *testing.T) {
	for _, js := range []string{
		`{"id":"sb1","state":"paused"}`,
		`{"id":"sb1","phase":"sleeping","state":"notready"}`,
	} {
		var r Record
		if err := json.Unmarshal([]byte(js), &r); err == nil {
			t.Errorf("%s: decoded as %+v", js, r)
		}
	}
}

// TestRecordRoundTrip writes and reads each phase in the current format,
// and checks the old fields written for an older podbay: what it decodes
// means the same to it as the phase does here.
func TestRecordRoundTrip(t *testing.T) {
	type legacy struct {
		state                                    State
		netSetup, netStopped, stopping, removing bool
	}
	for name, want := range map[string]legacy{
		"creating/cni":          {state: StateCreating},
		"creating/cni+net+ctr":  {state: StateCreating, netSetup: true},
		"creating/host+ctr":     {state: StateCreating},
		"ready/cni":             {state: StateReady, netSetup: true},
		"ready/host":            {state: StateReady},
		"exited/cni":            {state: StateNotReady, netSetup: true},
		"exited/host":           {state: StateNotReady},
		"stopping/cni":          {state: StateNotReady, netSetup: true, stopping: true},
		"stopping/cni-released": {state: StateNotReady, netStopped: true, stopping: true},
		"stopping/host":         {state: StateNotReady, stopping: true},
		"stopped/cni":           {state: StateNotReady, netStopped: true},
		"stopped/host":          {state: StateNotReady},
		"removing/cni":          {state: StateNotReady, netSetup: true, stopping: true, removing: true},
		"removing/cni-released": {state: StateNotReady, netStopped: true, stopping: true, removing: true},
		"removing/host":         {state: StateNotReady, stopping: true, removing: true},
	} {
		t.Run(name, func(t *testing.T) {
			r := lifecycleRecords()[name]
			r.Name, r.Dir, r.Labels = "k8s_POD_web", "/d", map[string]string{"a": "b"}
			r.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("read back\n %+v\nwrote\n %+v", got, r)
			}

			var o oldRecord
			if err := json.Unmarshal(b, &o); err != nil {
				t.Fatal(err)
			}
			gotOld := legacy{o.State, o.NetworkSetup, o.NetworkStopped, o.Stopping, o.Removing}
			if gotOld != want || o.ContainerCreated != r.ContainerCreated || o.ID != r.ID || o.Dir != r.Dir {
				t.Errorf("an older podbay reads %+v (container %v), want %+v", gotOld, o.ContainerCreated, want)
			}

			// Rewritten by an older podbay, the record has no phase; read
			// here again it comes back the same, but for a stopped host pod
			// (read as exited, see legacyFields.phases).
			b, err = json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			var again Record
			if err := json.Unmarshal(b, &again); err != nil {
				t.Fatal(err)
			}
			wantAgain := r
			if name == "stopped/host" {
				wantAgain.Phase = PhaseExited
			}
			if !reflect.DeepEqual(again, wantAgain) {
				t.Errorf("after an older podbay rewrote it\n %+v\nwant\n %+v", again, wantAgain)
			}
		})
	}
}

// A record written before bundles moved to the state dir names none: its
// bundle is the one in its dir. Bundle survives the record's round trip.
func TestBundleDir(t *testing.T) {
	old := `{"id":"a","phase":"ready","dir":"/var/lib/podbay/sandboxes/a"}`
	var rec Record
	if err := json.Unmarshal([]byte(old), &rec); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.BundleDir(), "/var/lib/podbay/sandboxes/a/bundle"; got != want {
		t.Errorf("old record: BundleDir() = %q, want %q", got, want)
	}
	rec.Bundle = "/run/podbay/bundles/a"
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got, want := back.BundleDir(), "/run/podbay/bundles/a"; got != want {
		t.Errorf("new record: BundleDir() = %q, want %q", got, want)
	}
}
