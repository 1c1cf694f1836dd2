package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/config"
)

func TestCheckPartialPulls(t *testing.T) {
	cfg := config.Default()
	cfg.Image.StorageRoot = t.TempDir()
	now := time.Now()
	if r := CheckPartialPulls(cfg, now); r.Verdict != OK || !strings.Contains(r.Reason, ": none (") {
		t.Errorf("no directory: %+v", r)
	}
	dir := filepath.Join(cfg.Image.StorageRoot, partialDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"sha256-a": 1 << 20, "sha256-a.json": 80, "sha256-b": 2 << 20, ".sha256-b.json": 80} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := now.Add(-3 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "sha256-a"), old, old); err != nil {
		t.Fatal(err)
	}
	r := CheckPartialPulls(cfg, now)
	if r.Verdict != OK || !strings.Contains(r.Reason, "2 interrupted layer downloads, 3.0 MiB, the oldest written 3h0m0s ago") {
		t.Errorf("two partial files: %+v", r)
	}
}
