package doctor

import (
	"context"
	"errors"
	"testing"
)

func TestRunConfigFails(t *testing.T) {
	r := Run(context.Background(), Options{ConfigPath: "/etc/podbay/podbay.toml", ConfigErr: errors.New("unknown keys: bogus"),
		Checks: true, Leaks: true, Probe: newFakeProbe()})
	if len(r.Checks) != 1 || r.Checks[0].Check != "config" || r.Checks[0].Verdict != Fail {
		t.Fatalf("checks = %+v", r.Checks)
	}
	if r.LeakError == "" || r.Records != nil || r.ExitCode() != ExitFailed {
		t.Fatalf("leak report made without a config: %+v", r)
	}
	// Leaks only: the same status.
	r = Run(context.Background(), Options{ConfigErr: errors.New("x"), Leaks: true, Probe: newFakeProbe()})
	if len(r.Checks) != 0 || r.ExitCode() != ExitFailed {
		t.Fatalf("leaks only: %+v", r)
	}
}
