package network

import (
	"encoding/json"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"
)

// ConfFile is one candidate file of a CNI config dir as podbayd's loader
// reads it, without running any plugin (podbay doctor inspects a host with
// it).
type ConfFile struct {
	// File is the base name in the dir.
	File string
	// List is the parsed network, nil when Err is set.
	List *libcni.NetworkConfigList
	// Err is why the file does not load (parse error, bad network name).
	Err error
}

// ReadConfDir parses dir's candidate files in the order podbayd considers
// them (lexical, .conf, .conflist and .json together). podbayd uses the
// first that loads and whose plugins all exist in its plugin dirs (and
// support its cniVersion, which only running the plugins tells).
func ReadConfDir(dir string) ([]ConfFile, error) {
	names, err := confFileNames(dir)
	if err != nil {
		return nil, err
	}
	out := make([]ConfFile, 0, len(names))
	for _, name := range names {
		f := ConfFile{File: name}
		f.List, f.Err = loadConfFile(filepath.Join(dir, name))
		if f.Err == nil {
			if err := utils.ValidateNetworkName(f.List.Name); err != nil {
				f.List, f.Err = nil, err
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// DefaultConfList parses the conflist New would write for c when ConfDir
// holds no loadable config.
func DefaultConfList(c Config) (*libcni.NetworkConfigList, error) {
	c = c.withDefaults()
	data, err := c.defaultConfList(c.DefaultSubnet)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(data)
}

// BridgeName returns the bridge a "bridge" plugin in list attaches pods to
// ("" when the list has none).
func BridgeName(list *libcni.NetworkConfigList) string { return bridgeName(list) }

// HostLocalDir returns the directory where a host-local IPAM in list keeps
// the network's reservations (<dataDir>/<network name>, dataDir defaulting
// to /var/lib/cni/networks), or "" when no plugin of list uses host-local.
func HostLocalDir(list *libcni.NetworkConfigList) string {
	for _, p := range list.Plugins {
		var conf struct {
			IPAM struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil || conf.IPAM.Type != "host-local" {
			continue
		}
		dir := conf.IPAM.DataDir
		if dir == "" {
			dir = "/var/lib/cni/networks"
		}
		return filepath.Join(dir, list.Name)
	}
	return ""
}
