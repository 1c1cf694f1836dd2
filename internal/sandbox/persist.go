package sandbox

import (
	"encoding/json"
	"fmt"
)

// legacyFields are the lifecycle fields of records written before phases
// (format version 1 as well: the format stays 1, so that an older podbay
// started on this state reads the records rather than quarantining them).
// They are still written, derived from the phases, for that older podbay;
// they are read only from a record that has no phase.
type legacyFields struct {
	State State `json:"state"`
	// NetworkSetup was set from just before CNI ADD until Stop's CNI DEL.
	NetworkSetup bool `json:"networkSetup,omitempty"`
	// NetworkStopped was set once Stop had released the network.
	NetworkStopped bool `json:"networkStopped,omitempty"`
	// Stopping was set, with the state notready, from the start of a Stop
	// to its end.
	Stopping bool `json:"stopping,omitempty"`
	// Removing was set when RemovePodSandbox began.
	Removing bool `json:"removing,omitempty"`
}

// recordFields is Record without its methods, so that encoding it does not
// recurse.
type recordFields Record

type recordJSON struct {
	recordFields
	legacyFields
}

// MarshalJSON writes the record with the legacy fields derived from it.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(recordJSON{recordFields(r), r.legacy()})
}

// UnmarshalJSON reads a record; one without a phase (written before phases)
// gets its phases from the legacy fields.
func (r *Record) UnmarshalJSON(b []byte) error {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	rec := Record(j.recordFields)
	if rec.Phase == "" {
		var err error
		if rec.Phase, rec.Network, err = j.legacyFields.phases(rec.NetworkMode); err != nil {
			return err
		}
	}
	if !rec.Phase.Known() {
		return fmt.Errorf("sandbox record %s: unknown phase %q", rec.ID, rec.Phase)
	}
	*r = rec
	return nil
}

// legacy is what a podbay before phases would have written for r. A
// removal is also written as stopping, so that such a podbay runs Stop's
// idempotent steps again before removing, as this one does.
func (r Record) legacy() legacyFields {
	return legacyFields{
		State:          r.Phase.State(),
		NetworkSetup:   r.Network == NetworkAttached,
		NetworkStopped: r.Network == NetworkReleased,
		Stopping:       r.Phase == PhaseStopping || r.Phase == PhaseRemoving,
		Removing:       r.Phase == PhaseRemoving,
	}
}

// phases reads the phases from the fields of a record written before
// phases. A published CNI pod owes a CNI DEL until NetworkStopped, as the
// old Stop assumed. An old notready host-network pod may have been stopped
// or may have exited; it is read as exited, so that a Stop runs its
// idempotent steps once more.
func (l legacyFields) phases(networkMode string) (Phase, NetworkPhase, error) {
	if l.State == StateCreating {
		if l.NetworkSetup {
			return PhaseCreating, NetworkAttached, nil
		}
		return PhaseCreating, NetworkNone, nil
	}
	net := NetworkNone
	if networkMode == ModeCNI {
		net = NetworkAttached
		if l.NetworkStopped {
			net = NetworkReleased
		}
	}
	switch {
	case l.State != StateReady && l.State != StateNotReady:
		return "", "", fmt.Errorf("sandbox record: unknown state %q", l.State)
	case l.Removing:
		return PhaseRemoving, net, nil
	case l.Stopping:
		return PhaseStopping, net, nil
	case l.State == StateReady:
		return PhaseReady, net, nil
	case net == NetworkReleased:
		return PhaseStopped, net, nil
	}
	return PhaseExited, net, nil
}
