package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/podbay/podbay/internal/config"
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

// TestRunNoRecords: with NoRecords nothing is read from a daemon or its
// database, and everything of podbay's found is reported.
func TestRunNoRecords(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root, cfg.State, cfg.NetNSDir = filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "netns")
	cfg.Listen = filepath.Join(dir, "podbay.sock")
	cfg.Image.StorageRoot, cfg.Image.RunRoot = filepath.Join(dir, "storage"), filepath.Join(dir, "run")
	cfg.Network.ConfDir, cfg.Network.CacheDir, cfg.Network.WriteDefault = filepath.Join(dir, "net.d"), filepath.Join(dir, "cni"), false
	if err := os.MkdirAll(filepath.Join(cfg.Root, "sandboxes", orphanPod), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Run(context.Background(), Options{Config: cfg, Leaks: true, Probe: newFakeProbe(), NoRecords: true})
	if r.LeakError != "" || r.Records == nil || r.Records.Source != SourceNone {
		t.Fatalf("report: %+v", r)
	}
	if len(r.Leaks) != 1 || r.Leaks[0].Kind != KindDir || r.Leaks[0].ID != orphanPod || r.ExitCode() != ExitLeaks {
		t.Fatalf("leaks = %+v (exit %d), want the sandbox dir", r.Leaks, r.ExitCode())
	}
}
