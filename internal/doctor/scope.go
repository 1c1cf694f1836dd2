package doctor

import (
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/network"
)

// Scope is where an inventory looks for podbay's things: a node's
// configuration (ScopeOf, what `podbay doctor` uses), or an integration
// env's own directories, bridge and cgroup root (the tests' leak check).
type Scope struct {
	// Config gives podbay's directories: root, state, netns_dir, the image
	// store, the runtime handlers' roots and the libcni cache.
	Config *config.Config
	// Network is the CNI network pods join; nil looks for no bridge, IPs,
	// ifb devices or rules.
	Network *Network
	// Owns are directories wholly podbay's: any mount below them, and any
	// process whose arguments, working directory or binary is in them, is
	// podbay's whether or not it names an ID. (In a node's scope podbay's
	// directories are not: a process or mount there must name an ID.)
	Owns []string
	// CgroupRoot is the pods' cgroup parent as a path in each cgroup
	// hierarchy; "" looks at no cgroups. A process in it is podbay's.
	CgroupRoot string
	// KnownIDs are IDs the caller knows podbay used. The things named by a
	// hash of an ID (ifb devices, shim sockets) are looked for for these
	// as well as for every ID the rest of the inventory names.
	KnownIDs map[string]bool
	// DaemonPID is the running podbayd's PID, 0 when none runs. Its
	// process is never reported, and while it runs the mounts it keeps
	// without an ID and its network's masquerade rules are its own.
	DaemonPID int
}

// ScopeOf is a node's scope: what cfg names, the network n (nil when
// none), and no cgroups — default_cgroup_parent is shared with the kubelet
// and other engines, so a process or cgroup there is not known to be
// podbay's.
func ScopeOf(cfg *config.Config, n *Network, daemonPID int) Scope {
	return Scope{Config: cfg, Network: n, DaemonPID: daemonPID}
}

func (s Scope) cniConfig() network.Config {
	nc := s.Config.Network
	return network.Config{ConfDir: nc.ConfDir, PluginDirs: nc.PluginDirs, CacheDir: nc.CacheDir}
}
