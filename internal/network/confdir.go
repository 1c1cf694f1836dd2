package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// confExtensions are the config file kinds considered, as kubelet and
// containerd do. Files of all three kinds are ordered together, lexically.
var confExtensions = []string{".conf", ".conflist", ".json"}

// confSnapshot is one parsed view of ConfDir. It is immutable once stored.
type confSnapshot struct {
	// fingerprint identifies the state of ConfDir and PluginDirs this view
	// was built from; a different fingerprint means reload.
	fingerprint string
	// selected is the default network; nil when none is usable.
	selected *selectedConfig
	// skipped are the files before the selected one (all files when none is
	// selected) that were not usable.
	skipped []SkippedConfig
	// err is set when the view cannot be used for Setup.
	err error
}

// selectedConfig is the network Setup adds pods to.
type selectedConfig struct {
	file string // base name in ConfDir
	list *libcni.NetworkConfigList
	// bridge is the host bridge named by a "bridge" plugin in the list, ""
	// when the list has none; Settings.Bridge is filled from it.
	bridge string
	// trimmed are list's variants without the plugins a pod has no use
	// for, when podbay generated list (trim.go); nil otherwise.
	trimmed *trimmedLists
}

// config returns the current view of ConfDir, re-reading it when its files
// or the plugin directories changed since the last call. The unchanged case
// costs a directory read and a stat per file.
func (m *Manager) config(ctx context.Context) (*confSnapshot, error) {
	fp, err := m.fingerprint()
	if err != nil {
		return nil, fmt.Errorf("read cni config dir: %w", err)
	}
	snap := m.loaded.Load()
	if snap == nil || snap.fingerprint != fp {
		if snap, err = m.reload(ctx, fp); err != nil {
			return nil, err
		}
	}
	if snap.err != nil {
		return nil, snap.err
	}
	return snap, nil
}

func (m *Manager) reload(ctx context.Context, fp string) (*confSnapshot, error) {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	if snap := m.loaded.Load(); snap != nil && snap.fingerprint == fp {
		return snap, nil // another caller reloaded while we waited
	}
	snap := m.loadConfDir(ctx, fp)
	if err := ctx.Err(); err != nil {
		// A cancelled VERSION call says nothing about the plugin; do not
		// remember it as unusable until the directory next changes.
		return nil, fmt.Errorf("load cni config: %w", err)
	}
	if snap.selected != nil {
		// Not remembered on failure either: the next call tries again.
		if err := m.ensureMasquerade(ctx, snap.selected.list); err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
		}
	}
	m.loaded.Store(snap)
	logSnapshot(ctx, m.cfg.ConfDir, snap)
	return snap, nil
}

func logSnapshot(ctx context.Context, dir string, snap *confSnapshot) {
	l := log.G(ctx)
	if snap.selected == nil {
		l.Warn("no usable cni network config", "dir", dir, "err", snap.err)
		return
	}
	for _, s := range snap.skipped {
		l.Warn("skipping cni network config", "file", s.File, "reason", s.Reason)
	}
	l.Info("cni network config loaded", "file", snap.selected.file,
		"network", snap.selected.list.Name, "cniVersion", snap.selected.list.CNIVersion)
	if snap.err != nil {
		l.Warn("cni network unusable", "err", snap.err)
	}
}

// fingerprint summarizes ConfDir's candidate files (name, inode, size, mtime)
// and the plugin directories' mtimes: adding, replacing or editing a config,
// and installing or removing a plugin, all change it.
func (m *Manager) fingerprint() (string, error) {
	var b strings.Builder
	names, err := confFileNames(m.cfg.ConfDir)
	if err != nil {
		return "", err
	}
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(m.cfg.ConfDir, name))
		writeStat(&b, name, fi, err)
	}
	b.WriteString("|")
	for _, dir := range m.cfg.PluginDirs {
		fi, err := os.Stat(dir)
		writeStat(&b, dir, fi, err)
	}
	return b.String(), nil
}

func writeStat(b *strings.Builder, name string, fi fs.FileInfo, err error) {
	if err != nil {
		fmt.Fprintf(b, "%s:!%v;", name, err)
		return
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	fmt.Fprintf(b, "%s:%d:%d:%d;", name, ino, fi.Size(), fi.ModTime().UnixNano())
}

// confFileNames lists the base names of dir's candidate config files in
// lexical order. A missing dir has none.
func confFileNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !slices.Contains(confExtensions, filepath.Ext(e.Name())) {
			continue
		}
		names = append(names, e.Name())
	}
	slices.Sort(names) // os.ReadDir sorts already; keep the contract explicit
	return names, nil
}

// loadConfDir picks the default network: the first file, in lexical order,
// that parses as a network config whose name is valid and whose plugins all
// exist in PluginDirs and support its cniVersion — what kubelet's and
// containerd's CNI loaders do.
func (m *Manager) loadConfDir(ctx context.Context, fp string) *confSnapshot {
	snap := &confSnapshot{fingerprint: fp}
	names, err := confFileNames(m.cfg.ConfDir)
	if err != nil {
		snap.err = fmt.Errorf("read cni config dir: %w", err)
		return snap
	}
	for _, name := range names {
		sel, err := m.loadUsable(ctx, name)
		if err != nil {
			snap.skipped = append(snap.skipped, SkippedConfig{File: name, Reason: err.Error()})
			continue
		}
		snap.selected = sel
		break
	}
	if snap.selected == nil {
		snap.err = &NoConfigError{Dir: m.cfg.ConfDir, Skipped: snap.skipped}
	}
	return snap
}

func (m *Manager) loadUsable(ctx context.Context, name string) (*selectedConfig, error) {
	list, err := loadConfFile(filepath.Join(m.cfg.ConfDir, name))
	if err != nil {
		return nil, err
	}
	if err := utils.ValidateNetworkName(list.Name); err != nil {
		return nil, fmt.Errorf("network name %q: %w", list.Name, err)
	}
	if _, err := m.cni.ValidateNetworkList(ctx, list); err != nil {
		return nil, fmt.Errorf("network %q: %w", list.Name, err)
	}
	trimmed, err := trimDefault(list)
	if err != nil {
		return nil, err
	}
	return &selectedConfig{file: name, list: list, bridge: bridgeName(list), trimmed: trimmed}, nil
}

// loadConfFile parses a .conflist, or a single-plugin .conf/.json turned into
// a list. A .conf that holds a list (it has "plugins") is read as a list, as
// some installers name them that way.
func loadConfFile(path string) (*libcni.NetworkConfigList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if filepath.Ext(path) != ".conflist" {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(data, &probe); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		if _, isList := probe["plugins"]; !isList {
			conf, err := libcni.ConfFromBytes(data)
			if err != nil {
				return nil, err
			}
			return libcni.ConfListFromConf(conf)
		}
	}
	return libcni.ConfListFromBytes(data)
}

// bridgeName returns the bridge a "bridge" plugin in list attaches pods to.
func bridgeName(list *libcni.NetworkConfigList) string {
	for _, p := range list.Plugins {
		if p.Network.Type != "bridge" {
			continue
		}
		var conf struct {
			Bridge string `json:"bridge"`
		}
		if err := json.Unmarshal(p.Bytes, &conf); err != nil {
			return ""
		}
		if conf.Bridge == "" {
			return "cni0" // the bridge plugin's default
		}
		return conf.Bridge
	}
	return ""
}

// anyLoadable reports whether some file in dir parses as a network config,
// whether or not its plugins are installed.
func anyLoadable(dir string) (bool, error) {
	names, err := confFileNames(dir)
	if err != nil {
		return false, err
	}
	for _, name := range names {
		if _, err := loadConfFile(filepath.Join(dir, name)); err == nil {
			return true, nil
		}
	}
	return false, nil
}
