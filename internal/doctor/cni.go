package doctor

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/network"
)

// Network is the CNI network podbayd would attach pods to: the leak report
// looks for its bridge, its host-local reservations and its iptables rules.
type Network struct {
	Name string
	// File is the config file in conf_dir, or "" for the default network
	// podbayd would write.
	File   string
	Bridge string
	// IPAMDir is host-local's directory of the network's reservations, ""
	// when the network does not use host-local.
	IPAMDir string
	Plugins []string
}

func networkOf(file string, list *libcni.NetworkConfigList) *Network {
	n := &Network{Name: list.Name, File: file, Bridge: network.BridgeName(list), IPAMDir: network.HostLocalDir(list)}
	for _, p := range list.Plugins {
		n.Plugins = append(n.Plugins, p.Network.Type)
		// The IPAM plugin is run by its main plugin: it must be there too.
		if p.Network.IPAM.Type != "" && !slices.Contains(n.Plugins, p.Network.IPAM.Type) {
			n.Plugins = append(n.Plugins, p.Network.IPAM.Type)
		}
	}
	return n
}

// ResolveNetwork reads conf_dir the way podbayd does — the first file, in
// lexical order, that loads and whose plugins (and loopback) all exist in
// plugin_dirs — and checks it. With no loadable file, podbayd writes its
// default network when write_default_config is set: then that network's
// plugins are checked. It returns the network (nil when there is none) and
// the verdict.
func ResolveNetwork(p Probe, cfg *config.Config) (*Network, Result) {
	const check = "cni"
	nc := cfg.Network
	files, err := network.ReadConfDir(nc.ConfDir)
	if err != nil {
		return nil, fail(check, "make network.conf_dir readable", "%s: %v", nc.ConfDir, err)
	}
	var skipped []string
	var firstLoadable *Network
	for _, f := range files {
		if f.Err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", f.File, f.Err))
			continue
		}
		n := networkOf(f.File, f.List)
		if firstLoadable == nil {
			firstLoadable = n
		}
		if missing := missingPlugins(p, nc.PluginDirs, n.Plugins); len(missing) > 0 {
			skipped = append(skipped, fmt.Sprintf("%s: plugins not in %s: %s", f.File, strings.Join(nc.PluginDirs, ", "), strings.Join(missing, ", ")))
			continue
		}
		desc := fmt.Sprintf("network %q from %s: plugins %s found", n.Name, filepath.Join(nc.ConfDir, f.File), strings.Join(n.Plugins, ", "))
		if len(skipped) > 0 {
			return n, warn(check, "fix or remove the files skipped", "%s; skipped before it: %s", desc, strings.Join(skipped, "; "))
		}
		return n, ok(check, "%s", desc)
	}
	if firstLoadable != nil {
		// podbayd does not write its default over an operator's config
		// whose plugins are not installed yet.
		return firstLoadable, fail(check, "install the plugins (Debian: containernetworking-plugins) or fix network.plugin_dirs",
			"no usable network in %s: %s", nc.ConfDir, strings.Join(skipped, "; "))
	}
	if !nc.WriteDefault {
		return nil, fail(check, "drop a conflist into "+nc.ConfDir+" or set write_default_config = true",
			"no network config in %s and write_default_config = false: pods cannot get a network", nc.ConfDir)
	}
	list, err := network.DefaultConfList(network.Config{DefaultName: nc.DefaultName, DefaultBridge: nc.DefaultBridge, DefaultSubnet: nc.DefaultSubnet})
	if err != nil {
		return nil, fail(check, "fix network.default_subnet", "default network: %v", err)
	}
	n := networkOf("", list)
	if missing := missingPlugins(p, nc.PluginDirs, n.Plugins); len(missing) > 0 {
		return n, fail(check, "install the plugins (Debian: containernetworking-plugins) or fix network.plugin_dirs",
			"no network config in %s; podbayd's default needs plugins not in %s: %s", nc.ConfDir, strings.Join(nc.PluginDirs, ", "), strings.Join(missing, ", "))
	}
	if dir, _, err := writableDir(p, nc.ConfDir); err != nil {
		return n, fail(check, "make "+nc.ConfDir+" writable or drop a conflist into it", "no network config in %s, and podbayd cannot write its default there (%s): %v", nc.ConfDir, dir, err)
	}
	return n, ok(check, "no network config in %s: podbayd would write %s (network %q, bridge %s, %s); plugins %s found",
		nc.ConfDir, network.DefaultConfFile, n.Name, n.Bridge, nc.DefaultSubnet, strings.Join(n.Plugins, ", "))
}

// missingPlugins returns the plugin types found in no plugin dir as an
// executable file. (podbayd brings a pod's "lo" up itself: the loopback
// plugin is not needed.)
func missingPlugins(p Probe, dirs, types []string) []string {
	var missing []string
	seen := map[string]bool{}
	for _, t := range types {
		if seen[t] {
			continue
		}
		seen[t] = true
		found := false
		for _, d := range dirs {
			if _, ok := checkExecutable(p, filepath.Join(d, t)); ok {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, t)
		}
	}
	return missing
}
