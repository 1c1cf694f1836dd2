package network

import (
	"context"
	"encoding/json"
	"slices"
)

// ConfigInUse describes the network configuration Setup uses: what
// `crictl info` shows as podbay's cniconfig (containerd's cniconfig and
// lastCNILoadStatus).
type ConfigInUse struct {
	ConfDir    string   `json:"confDir"`
	PluginDirs []string `json:"pluginDirs"`
	// File is the selected config file's name in ConfDir, Network its
	// network name; both empty when none is usable.
	File       string `json:"file,omitempty"`
	Network    string `json:"network,omitempty"`
	CNIVersion string `json:"cniVersion,omitempty"`
	// Config is the selected file's content.
	Config json.RawMessage `json:"config,omitempty"`
	// Skipped are the files before it that could not be used, and why.
	Skipped []SkippedConfig `json:"skipped,omitempty"`
	// LoadStatus is "OK", or why no network can be set up.
	LoadStatus string `json:"lastCNILoadStatus"`
}

// ConfigInUse reloads ConfDir if it changed and describes what it holds.
func (m *Manager) ConfigInUse(ctx context.Context) ConfigInUse {
	out := ConfigInUse{ConfDir: m.cfg.ConfDir, PluginDirs: slices.Clone(m.cfg.PluginDirs), LoadStatus: "OK"}
	if _, err := m.config(ctx); err != nil {
		out.LoadStatus = err.Error()
	}
	snap := m.loaded.Load()
	if snap == nil {
		return out
	}
	out.Skipped = slices.Clone(snap.skipped)
	if sel := snap.selected; sel != nil {
		out.File, out.Network, out.CNIVersion = sel.file, sel.list.Name, sel.list.CNIVersion
		if json.Valid(sel.list.Bytes) {
			out.Config = json.RawMessage(sel.list.Bytes)
		}
	}
	return out
}
