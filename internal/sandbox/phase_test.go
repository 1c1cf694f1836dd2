package sandbox

import (
	"errors"
	"reflect"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// lifecycleRecords are the records the transitions can make, by name.
func lifecycleRecords() map[string]Record {
	rec := func(p Phase, mode string, net NetworkPhase, ctr bool) Record {
		return Record{ID: "sb", Phase: p, NetworkMode: mode, Network: net, ContainerCreated: ctr}
	}
	return map[string]Record{
		"creating/cni":          rec(PhaseCreating, ModeCNI, NetworkNone, false),
		"creating/cni+net":      rec(PhaseCreating, ModeCNI, NetworkAttached, false),
		"creating/cni+ctr":      rec(PhaseCreating, ModeCNI, NetworkNone, true),
		"creating/cni+net+ctr":  rec(PhaseCreating, ModeCNI, NetworkAttached, true),
		"creating/host":         rec(PhaseCreating, ModeHost, NetworkNone, false),
		"creating/host+ctr":     rec(PhaseCreating, ModeHost, NetworkNone, true),
		"ready/cni":             rec(PhaseReady, ModeCNI, NetworkAttached, true),
		"ready/host":            rec(PhaseReady, ModeHost, NetworkNone, true),
		"exited/cni":            rec(PhaseExited, ModeCNI, NetworkAttached, true),
		"exited/host":           rec(PhaseExited, ModeHost, NetworkNone, true),
		"stopping/cni":          rec(PhaseStopping, ModeCNI, NetworkAttached, true),
		"stopping/cni-released": rec(PhaseStopping, ModeCNI, NetworkReleased, true),
		"stopping/host":         rec(PhaseStopping, ModeHost, NetworkNone, true),
		"stopped/cni":           rec(PhaseStopped, ModeCNI, NetworkReleased, true),
		"stopped/host":          rec(PhaseStopped, ModeHost, NetworkNone, true),
		"removing/cni":          rec(PhaseRemoving, ModeCNI, NetworkAttached, true),
		"removing/cni-released": rec(PhaseRemoving, ModeCNI, NetworkReleased, true),
		"removing/host":         rec(PhaseRemoving, ModeHost, NetworkNone, true),

		"stopping/cni+pause-released":          released(rec(PhaseStopping, ModeCNI, NetworkAttached, true)),
		"stopping/cni-released+pause-released": released(rec(PhaseStopping, ModeCNI, NetworkReleased, true)),
		"stopping/host+pause-released":         released(rec(PhaseStopping, ModeHost, NetworkNone, true)),
		"stopped/cni+pause-released":           released(rec(PhaseStopped, ModeCNI, NetworkReleased, true)),
		"stopped/host+pause-released":          released(rec(PhaseStopped, ModeHost, NetworkNone, true)),
		"removing/cni+pause-released":          released(rec(PhaseRemoving, ModeCNI, NetworkAttached, true)),
		"removing/cni-released+pause-released": released(rec(PhaseRemoving, ModeCNI, NetworkReleased, true)),
		"removing/host+pause-released":         released(rec(PhaseRemoving, ModeHost, NetworkNone, true)),
	}
}

// released is r with its pause container released.
func released(r Record) Record {
	r.PauseReleased = true
	return r
}

// TestTransitions applies every transition to every record: those listed
// lead to the named record, every other one is refused and changes nothing.
func TestTransitions(t *testing.T) {
	records := lifecycleRecords()
	for name, r := range records {
		if err := r.consistent(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, tr := range []struct {
		name    string
		step    func(*Record) error
		allowed map[string]string // from → to
	}{
		{"BeginNetworkSetup", (*Record).BeginNetworkSetup, map[string]string{
			"creating/cni":     "creating/cni+net",
			"creating/cni+ctr": "creating/cni+net+ctr", // network after start
		}},
		{"BeginContainerCreate", (*Record).BeginContainerCreate, map[string]string{
			"creating/cni":     "creating/cni+ctr", // network after start
			"creating/cni+net": "creating/cni+net+ctr",
			"creating/host":    "creating/host+ctr",
		}},
		{"MarkReady", (*Record).MarkReady, map[string]string{
			"creating/cni+net+ctr": "ready/cni",
			"creating/host+ctr":    "ready/host",
		}},
		{"MarkExited", (*Record).MarkExited, map[string]string{
			"ready/cni":  "exited/cni",
			"ready/host": "exited/host",
		}},
		{"BeginStop", (*Record).BeginStop, map[string]string{
			"ready/cni":   "stopping/cni",
			"ready/host":  "stopping/host",
			"exited/cni":  "stopping/cni",
			"exited/host": "stopping/host",
		}},
		{"ReleaseNetwork", (*Record).ReleaseNetwork, map[string]string{
			"stopping/cni":                "stopping/cni-released",
			"removing/cni":                "removing/cni-released",
			"stopping/cni+pause-released": "stopping/cni-released+pause-released",
			"removing/cni+pause-released": "removing/cni-released+pause-released",
		}},
		{"ReleasePause", (*Record).ReleasePause, map[string]string{
			"stopping/cni":          "stopping/cni+pause-released",
			"stopping/cni-released": "stopping/cni-released+pause-released",
			"stopping/host":         "stopping/host+pause-released",
			"removing/cni":          "removing/cni+pause-released",
			"removing/cni-released": "removing/cni-released+pause-released",
			"removing/host":         "removing/host+pause-released",
		}},
		{"FinishStop", (*Record).FinishStop, map[string]string{
			"stopping/cni-released":                "stopped/cni",
			"stopping/host":                        "stopped/host",
			"stopping/cni-released+pause-released": "stopped/cni+pause-released",
			"stopping/host+pause-released":         "stopped/host+pause-released",
		}},
		{"BeginRemove", (*Record).BeginRemove, map[string]string{
			"ready/cni":             "removing/cni",
			"ready/host":            "removing/host",
			"exited/cni":            "removing/cni",
			"exited/host":           "removing/host",
			"stopping/cni":          "removing/cni",
			"stopping/cni-released": "removing/cni-released",
			"stopping/host":         "removing/host",
			"stopped/cni":           "removing/cni-released",
			"stopped/host":          "removing/host",
			"removing/cni":          "removing/cni",
			"removing/cni-released": "removing/cni-released",
			"removing/host":         "removing/host",

			"stopping/cni+pause-released":          "removing/cni+pause-released",
			"stopping/cni-released+pause-released": "removing/cni-released+pause-released",
			"stopping/host+pause-released":         "removing/host+pause-released",
			"stopped/cni+pause-released":           "removing/cni-released+pause-released",
			"stopped/host+pause-released":          "removing/host+pause-released",
			"removing/cni+pause-released":          "removing/cni+pause-released",
			"removing/cni-released+pause-released": "removing/cni-released+pause-released",
			"removing/host+pause-released":         "removing/host+pause-released",
		}},
	} {
		for from, r := range records {
			sb := New(r)
			got, err := sb.Transition(tr.step)
			to, ok := tr.allowed[from]
			switch {
			case !ok && err == nil:
				t.Errorf("%s from %s: allowed, made %+v", tr.name, from, got)
			case !ok && !errors.Is(err, errdefs.ErrFailedPrecondition):
				t.Errorf("%s from %s: %v, want a failed precondition", tr.name, from, err)
			case !ok && !reflect.DeepEqual(got, r):
				t.Errorf("%s from %s: refused but changed the record to %+v", tr.name, from, got)
			case ok && err != nil:
				t.Errorf("%s from %s: %v", tr.name, from, err)
			case ok && !reflect.DeepEqual(got, records[to]):
				t.Errorf("%s from %s: %+v, want %s %+v", tr.name, from, got, to, records[to])
			}
			if !reflect.DeepEqual(sb.Record(), got) {
				t.Errorf("%s from %s: Transition returned %+v, holds %+v", tr.name, from, got, sb.Record())
			}
		}
	}
}

func TestPredicates(t *testing.T) {
	for name, want := range map[string]struct{ stopBegun, owesDEL, ips bool }{
		"creating/cni":          {},
		"creating/cni+net":      {owesDEL: true, ips: true},
		"creating/host+ctr":     {},
		"ready/cni":             {owesDEL: true, ips: true},
		"ready/host":            {},
		"exited/cni":            {owesDEL: true, ips: true},
		"exited/host":           {},
		"stopping/cni":          {stopBegun: true, owesDEL: true},
		"stopping/cni-released": {stopBegun: true},
		"stopping/host":         {stopBegun: true},
		"stopped/cni":           {stopBegun: true},
		"stopped/host":          {stopBegun: true},
		"removing/cni":          {stopBegun: true, owesDEL: true},
		"removing/cni-released": {stopBegun: true},
		"removing/host":         {stopBegun: true},
	} {
		r := lifecycleRecords()[name]
		if got := r.StopBegun(); got != want.stopBegun {
			t.Errorf("%s: StopBegun %v", name, got)
		}
		if got := r.OwesNetworkTeardown(); got != want.owesDEL {
			t.Errorf("%s: OwesNetworkTeardown %v", name, got)
		}
		if got := r.ReportsIPs(); got != want.ips {
			t.Errorf("%s: ReportsIPs %v", name, got)
		}
	}
}

func TestPhaseState(t *testing.T) {
	for p, want := range map[Phase]State{
		PhaseCreating: StateCreating, PhaseReady: StateReady, PhaseExited: StateNotReady,
		PhaseStopping: StateNotReady, PhaseStopped: StateNotReady, PhaseRemoving: StateNotReady,
	} {
		if got := p.State(); got != want {
			t.Errorf("%s: state %s, want %s", p, got, want)
		}
	}
}
