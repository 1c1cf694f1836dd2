package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCDIAndHooksDirs(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load(filepath.Join(dir, "missing.toml"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.CDISpecDirs, []string{"/etc/cdi", "/var/run/cdi"}) ||
		!slices.Equal(cfg.HooksDir, []string{"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"}) {
		t.Fatalf("defaults: cdi_spec_dirs %q, hooks_dir %q", cfg.CDISpecDirs, cfg.HooksDir)
	}

	path := filepath.Join(dir, "podbay.toml")
	load := func(content string) (*Config, error) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, false)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, cfg.Validate()
	}
	cfg, err = load("cdi_spec_dirs = [\"/srv/cdi\"]\nhooks_dir = []\n")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.CDISpecDirs, []string{"/srv/cdi"}) || len(cfg.HooksDir) != 0 {
		t.Fatalf("file values: cdi_spec_dirs %q, hooks_dir %q", cfg.CDISpecDirs, cfg.HooksDir)
	}
	_, err = load("cdi_spec_dirs = [\"cdi\"]\nhooks_dir = [\"/ok\", \"hooks.d\"]\n")
	if err == nil || !strings.Contains(err.Error(), `cdi_spec_dirs: "cdi"`) || !strings.Contains(err.Error(), `hooks_dir: "hooks.d"`) {
		t.Fatalf("relative dirs: err = %v", err)
	}
}
