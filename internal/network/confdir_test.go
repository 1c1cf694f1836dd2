package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func conflist(name, version string, plugins ...string) string {
	var ps []string
	for _, p := range plugins {
		ps = append(ps, fmt.Sprintf(`{"type":%q}`, p))
	}
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[%s]}`, version, name, strings.Join(ps, ","))
}

func singleConf(name, plugin string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":%q}`, name, plugin)
}

// newUnitManager returns a Manager over a temp ConfDir holding files and the
// fake plugins "loopback", "rec" and "rec2" (see recorderPlugin).
func newUnitManager(t *testing.T, files map[string]string) (m *Manager, logDir string) {
	t.Helper()
	pluginDir, logDir := fakePlugins(t, "loopback", "rec", "rec2")
	cfg := Config{
		ConfDir:    t.TempDir(),
		PluginDirs: []string{pluginDir},
		CacheDir:   t.TempDir(),
	}
	writeFiles(t, cfg.ConfDir, files)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The attachments' namespaces are not real; "lo" is checked on real
	// ones (TestLoopbackUp, the integration tests).
	m.loopbackUp = func(string) error { return nil }
	return m, logDir
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigSelection(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string
		wantFile    string
		wantNetwork string
		wantSkipped map[string]string // file -> substring of the reason
	}{
		{
			name: "lexical order across kinds",
			files: map[string]string{
				"20-b.conflist": conflist("b", "1.0.0", "rec"),
				"10-a.conf":     singleConf("a", "rec"),
			},
			wantFile: "10-a.conf", wantNetwork: "a",
		},
		{
			name: "json counts like conf",
			files: map[string]string{
				"05-x.json":     singleConf("x", "rec"),
				"10-y.conflist": conflist("y", "1.0.0", "rec"),
			},
			wantFile: "05-x.json", wantNetwork: "x",
		},
		{
			name: "conflist before conf when it sorts first",
			files: map[string]string{
				"10-a.conflist": conflist("a", "1.0.0", "rec", "rec2"),
				"10-a.conf":     singleConf("b", "rec"),
			},
			wantFile: "10-a.conf", wantNetwork: "b", // "10-a.conf" < "10-a.conflist"
		},
		{
			name:     "conf holding a list",
			files:    map[string]string{"10-list.conf": conflist("l", "1.0.0", "rec", "rec2")},
			wantFile: "10-list.conf", wantNetwork: "l",
		},
		{
			name: "other files ignored",
			files: map[string]string{
				"00-readme.txt":    "not a config",
				"01-backup.bak":    conflist("bak", "1.0.0", "rec"),
				"10-real.conflist": conflist("real", "1.0.0", "rec"),
			},
			wantFile: "10-real.conflist", wantNetwork: "real",
		},
		{
			name: "invalid files skipped with reason",
			files: map[string]string{
				"01-garbage.conflist": "{not json",
				"02-missing.conflist": conflist("m", "1.0.0", "rec", "nope"),
				"03-version.conflist": conflist("v", "0.2.0", "rec"),
				"04-empty.conflist":   `{"cniVersion":"1.0.0","name":"e","plugins":[]}`,
				"05-badname.conf":     singleConf("bad name!", "rec"),
				"06-notype.conf":      `{"cniVersion":"1.0.0","name":"n"}`,
				"07-noname.conflist":  `{"cniVersion":"1.0.0","plugins":[{"type":"rec"}]}`,
				"10-good.conflist":    conflist("good", "1.0.0", "rec"),
				"20-later.conflist":   "{also garbage, never read",
			},
			wantFile: "10-good.conflist", wantNetwork: "good",
			wantSkipped: map[string]string{
				"01-garbage.conflist": "error parsing configuration list",
				"02-missing.conflist": `failed to find plugin "nope"`,
				"03-version.conflist": `does not support config version "0.2.0"`,
				"04-empty.conflist":   "no plugins in list",
				"05-badname.conf":     `network name "bad name!"`,
				"06-notype.conf":      "missing 'type'",
				"07-noname.conflist":  "no name",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newUnitManager(t, tt.files)
			snap, err := m.config(context.Background())
			if err != nil {
				t.Fatalf("config: %v", err)
			}
			if snap.selected.file != tt.wantFile || snap.selected.list.Name != tt.wantNetwork {
				t.Errorf("selected %s (%s), want %s (%s)", snap.selected.file, snap.selected.list.Name, tt.wantFile, tt.wantNetwork)
			}
			if len(snap.skipped) != len(tt.wantSkipped) {
				t.Errorf("skipped %+v, want %d entries", snap.skipped, len(tt.wantSkipped))
			}
			for _, s := range snap.skipped {
				if want, ok := tt.wantSkipped[s.File]; !ok || !strings.Contains(s.Reason, want) {
					t.Errorf("skipped %s: reason %q, want it to contain %q", s.File, s.Reason, want)
				}
			}
			if err := m.Status(context.Background()); err != nil {
				t.Errorf("Status: %v", err)
			}
		})
	}
}

func TestStatusNoUsableConfig(t *testing.T) {
	t.Run("empty dir", func(t *testing.T) {
		m, _ := newUnitManager(t, nil)
		err := m.Status(context.Background())
		var nc *NoConfigError
		if !errors.As(err, &nc) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Status = %v, want a NoConfigError classified as failed precondition", err)
		}
		if !strings.Contains(err.Error(), "no usable cni network config in "+m.cfg.ConfDir) {
			t.Errorf("message %q", err)
		}
	})
	t.Run("missing dir", func(t *testing.T) {
		m, _ := newUnitManager(t, nil)
		m.cfg.ConfDir = filepath.Join(m.cfg.ConfDir, "absent")
		if err := m.Status(context.Background()); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Status = %v", err)
		}
	})
	t.Run("only unusable files", func(t *testing.T) {
		m, _ := newUnitManager(t, map[string]string{
			"10-a.conflist": conflist("a", "1.0.0", "calico"),
			"20-b.conf":     "{",
		})
		err := m.Status(context.Background())
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Status = %v", err)
		}
		for _, want := range []string{`10-a.conflist: network "a": [failed to find plugin "calico"`, "20-b.conf: parse"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
	t.Run("no loopback plugin", func(t *testing.T) {
		// podbay brings "lo" up itself: the network needs its own plugins.
		m, _ := newUnitManager(t, map[string]string{"10-a.conflist": conflist("a", "1.0.0", "rec")})
		if err := os.Remove(filepath.Join(m.cfg.PluginDirs[0], "loopback")); err != nil {
			t.Fatal(err)
		}
		if err := m.Status(context.Background()); err != nil {
			t.Fatalf("Status = %v, want ready without the loopback plugin", err)
		}
	})
}

// TestConfigReload changes ConfDir and the plugin dir under a running
// Manager: every change is seen by the next call, without a restart.
func TestConfigReload(t *testing.T) {
	ctx := context.Background()
	m, _ := newUnitManager(t, nil)
	dir := m.cfg.ConfDir
	selected := func() string {
		t.Helper()
		snap, err := m.config(ctx)
		if err != nil {
			return "error: " + err.Error()
		}
		return snap.selected.list.Name
	}

	if err := m.Status(ctx); err == nil {
		t.Fatal("Status ok with no config")
	}
	writeFiles(t, dir, map[string]string{"10-a.conflist": conflist("a", "1.0.0", "rec")})
	if got := selected(); got != "a" {
		t.Fatalf("after adding a config: %s", got)
	}
	snap1, _ := m.config(ctx)
	snap2, _ := m.config(ctx)
	if snap1 != snap2 {
		t.Error("unchanged dir was reloaded")
	}

	writeFiles(t, dir, map[string]string{"05-b.conflist": conflist("b", "1.0.0", "rec")})
	if got := selected(); got != "b" {
		t.Fatalf("after adding an earlier config: %s", got)
	}

	// Replaced in place via rename, as editors and installers do.
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(conflist("b2", "1.0.0", "rec")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "05-b.conflist")); err != nil {
		t.Fatal(err)
	}
	if got := selected(); got != "b2" {
		t.Fatalf("after replacing the config: %s", got)
	}

	// A config that names a plugin installed later.
	writeFiles(t, dir, map[string]string{"01-c.conflist": conflist("c", "1.0.0", "late")})
	if got := selected(); got != "b2" {
		t.Fatalf("with a config whose plugin is missing: %s", got)
	}
	writeScript(t, filepath.Join(m.cfg.PluginDirs[0], "late"), strings.ReplaceAll(recorderPlugin, "@LOG@", t.TempDir()))
	if got := selected(); got != "c" {
		t.Fatalf("after installing the plugin: %s", got)
	}

	for _, f := range []string{"01-c.conflist", "05-b.conflist", "10-a.conflist"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Status(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Status after removing every config = %v", err)
	}
}
