package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestScaleKeys(t *testing.T) {
	d := Default()
	if time.Duration(d.StatsCollectPeriod) != 10*time.Second || d.DebugPprof {
		t.Fatalf("defaults: stats_collect_period %v, debug_pprof %v", d.StatsCollectPeriod, d.DebugPprof)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		toml    string
		period  time.Duration
		pprof   bool
		invalid bool
	}{
		{"stats_collect_period = \"2s\"\ndebug_pprof = true\n", 2 * time.Second, true, false},
		{"stats_collect_period = \"0s\"\n", 0, false, false},
		{"stats_collect_period = \"-1s\"\n", -time.Second, false, true},
	} {
		path := filepath.Join(dir, "podbay.toml")
		if err := os.WriteFile(path, []byte(tc.toml), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, false)
		if err != nil {
			t.Fatalf("%q: %v", tc.toml, err)
		}
		if time.Duration(cfg.StatsCollectPeriod) != tc.period || cfg.DebugPprof != tc.pprof {
			t.Errorf("%q: period %v, pprof %v", tc.toml, cfg.StatsCollectPeriod, cfg.DebugPprof)
		}
		if err := cfg.Validate(); (err != nil) != tc.invalid {
			t.Errorf("%q: Validate = %v, want invalid %v", tc.toml, err, tc.invalid)
		}
	}
}
