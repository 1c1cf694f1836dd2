package network

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// capabilityOnlyPlugins are the plugins of podbay's default network that
// act on one capability and on nothing else, by the capability: portmap
// (hostPorts) and bandwidth (the bandwidth annotations). Without it, their
// ADD returns the previous result unchanged and their DEL finds nothing
// to remove; each is still an exec of a plugin binary, 3-5 ms of a pod's
// start and as much of its stop.
var capabilityOnlyPlugins = map[string]string{
	"portmap":   "portMappings",
	"bandwidth": "bandwidth",
}

// trimmedLists are the variants of podbay's own default network without
// the capability-only plugins an attachment has no use for.
type trimmedLists struct {
	// present are the capabilities the list's capability-only plugins act
	// on, in the list's order.
	present []string
	// lists are the variants by the capabilities they leave out, joined
	// by a comma in present's order (trimKey).
	lists map[string]*libcni.NetworkConfigList
}

// trimDefault returns the variants of list, a network podbay generated,
// or nil for any other network: an operator's network runs every plugin
// of its list, as CNI has it.
func trimDefault(list *libcni.NetworkConfigList) (*trimmedLists, error) {
	if !generatedByPodbay(list.Bytes) {
		return nil, nil
	}
	t := &trimmedLists{lists: map[string]*libcni.NetworkConfigList{}}
	for _, p := range list.Plugins {
		if c, ok := capabilityOnlyPlugins[p.Network.Type]; ok {
			t.present = append(t.present, c)
		}
	}
	// Every non-empty subset of present, as a bit mask over it.
	for mask := 1; mask < 1<<len(t.present); mask++ {
		drop := map[string]bool{}
		for i, c := range t.present {
			if mask&(1<<i) != 0 {
				drop[c] = true
			}
		}
		v, err := withoutCapabilityPlugins(list, drop)
		if err != nil {
			return nil, err
		}
		t.lists[t.key(drop)] = v
	}
	return t, nil
}

// forCaps returns the list to ADD an attachment with capability arguments
// caps through: the variant without the capability-only plugins caps has
// nothing for, or list itself.
func (t *trimmedLists) forCaps(list *libcni.NetworkConfigList, caps map[string]any) *libcni.NetworkConfigList {
	if t == nil {
		return list
	}
	drop := map[string]bool{}
	for _, c := range t.present {
		if _, used := caps[c]; !used {
			drop[c] = true
		}
	}
	if v := t.lists[t.key(drop)]; v != nil {
		return v
	}
	return list
}

// key names the variant without the capabilities in drop.
func (t *trimmedLists) key(drop map[string]bool) string {
	var names []string
	for _, c := range t.present {
		if drop[c] {
			names = append(names, c)
		}
	}
	return strings.Join(names, ",")
}

// withoutCapabilityPlugins is list without the capability-only plugins
// whose capability drop names. Its Bytes are its own JSON, the rest of
// list's kept as it is: libcni caches them with the ADD, and the DEL
// (Teardown's, from the cache) then runs the same plugins.
func withoutCapabilityPlugins(list *libcni.NetworkConfigList, drop map[string]bool) (*libcni.NetworkConfigList, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(list.Bytes, &top); err != nil {
		return nil, fmt.Errorf("network %q: %w", list.Name, err)
	}
	var plugins []json.RawMessage
	for _, p := range list.Plugins {
		if c, ok := capabilityOnlyPlugins[p.Network.Type]; ok && drop[c] {
			continue
		}
		plugins = append(plugins, p.Bytes)
	}
	raw, err := json.Marshal(plugins)
	if err != nil {
		return nil, err
	}
	top["plugins"] = raw
	data, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(data)
}
