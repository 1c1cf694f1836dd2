package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/podbay/podbay/internal/atomicfile"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

const (
	// DefaultConfFile is the file name of the default network in ConfDir.
	// "10-" sorts it before the usual "87-podman…"/"99-loopback…" leftovers
	// and after an operator's "00-…"/"05-…".
	DefaultConfFile = "10-podbay.conflist"

	// generatedByKey marks a conflist podbay wrote, so UpdatePodCIDR only
	// ever rewrites its own file. libcni ignores unknown top-level keys.
	generatedByKey   = "generatedBy"
	generatedByValue = "podbay"

	// defaultCNIVersion is the newest version Debian 12's plugins (1.1.1)
	// support; they report 0.1.0 … 1.0.0.
	defaultCNIVersion = "1.0.0"
)

type defaultConfList struct {
	CNIVersion  string `json:"cniVersion"`
	Name        string `json:"name"`
	GeneratedBy string `json:"generatedBy"`
	// PodbayMasquerade hands the pods' egress masquerade to podbay (see
	// masquerade.go): the bridge plugin's ipMasq is off.
	PodbayMasquerade bool  `json:"podbayMasquerade"`
	Plugins          []any `json:"plugins"`
}

type bridgePluginConf struct {
	Type        string            `json:"type"`
	Bridge      string            `json:"bridge"`
	IsGateway   bool              `json:"isGateway"`
	IPMasq      bool              `json:"ipMasq"`
	HairpinMode bool              `json:"hairpinMode"`
	IPAM        hostLocalIPAMConf `json:"ipam"`
}

type hostLocalIPAMConf struct {
	Type    string             `json:"type"`
	Ranges  [][]hostLocalRange `json:"ranges"`
	Routes  []ipamRoute        `json:"routes"`
	DataDir string             `json:"dataDir,omitempty"`
}

type hostLocalRange struct {
	Subnet string `json:"subnet"`
}

type ipamRoute struct {
	Dst string `json:"dst"`
}

type portmapPluginConf struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
	SNAT         bool            `json:"snat"`
}

type bandwidthPluginConf struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

// defaultConfList renders the default network for subnet (one CIDR, or an
// IPv4 and an IPv6 CIDR separated by a comma): bridge with host-local IPAM
// and a default route per family, its egress masqueraded by podbay's own
// rules (podbayMasquerade; see masquerade.go), portmap for hostPorts, and bandwidth for
// the pod's bandwidth annotations (a no-op for a pod without them). bandwidth
// comes last: it shapes the host-side veth that bridge made. Loopback is not
// in the list: Setup adds "lo" as a network of its own, as containerd does.
func (c Config) defaultConfList(subnet string) ([]byte, error) {
	nets, err := parseSubnets(subnet)
	if err != nil {
		return nil, err
	}
	ipam := hostLocalIPAMConf{Type: "host-local", DataDir: c.DefaultDataDir}
	for _, n := range nets {
		ipam.Ranges = append(ipam.Ranges, []hostLocalRange{{Subnet: n.String()}})
		dst := "0.0.0.0/0"
		if n.IP.To4() == nil {
			dst = "::/0"
		}
		ipam.Routes = append(ipam.Routes, ipamRoute{Dst: dst})
	}
	list := defaultConfList{
		CNIVersion:       defaultCNIVersion,
		Name:             c.DefaultName,
		GeneratedBy:      generatedByValue,
		PodbayMasquerade: true,
		Plugins: []any{
			bridgePluginConf{
				Type:      "bridge",
				Bridge:    c.DefaultBridge,
				IsGateway: true,
				// podbay masquerades the whole subnet with one rule set
				// rather than the plugin's chain per pod.
				IPMasq:      false,
				HairpinMode: true,
				IPAM:        ipam,
			},
			portmapPluginConf{
				Type:         "portmap",
				Capabilities: map[string]bool{"portMappings": true},
				SNAT:         true,
			},
			bandwidthPluginConf{
				Type:         "bandwidth",
				Capabilities: map[string]bool{"bandwidth": true},
			},
		},
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// parseSubnets parses "CIDR" or "CIDR,CIDR" (at most one per IP family) and
// returns the networks with their host bits cleared.
func parseSubnets(s string) ([]*net.IPNet, error) {
	var nets []*net.IPNet
	var v4, v6 bool
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		_, n, err := net.ParseCIDR(part)
		if err != nil {
			return nil, fmt.Errorf("%w: subnet %q: %w", errdefs.ErrInvalidArgument, part, err)
		}
		isV4 := n.IP.To4() != nil
		if (isV4 && v4) || (!isV4 && v6) {
			return nil, fmt.Errorf("%w: subnets %q: more than one per IP family", errdefs.ErrInvalidArgument, s)
		}
		v4 = v4 || isV4
		v6 = v6 || !isV4
		nets = append(nets, n)
	}
	return nets, nil
}

// ensureDefault writes the default conflist when no file in ConfDir parses
// as a network config. A config that parses but whose plugins are missing is
// the operator's choice (a CNI DaemonSet often writes its config before its
// binaries land); shadowing it with ours would hand pods the wrong network,
// so in that case nothing is written and Status reports why it is unusable.
func (m *Manager) ensureDefault(ctx context.Context) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	found, err := anyLoadable(m.cfg.ConfDir)
	if err != nil {
		return fmt.Errorf("read cni config dir: %w", err)
	}
	if found {
		return nil
	}
	data, err := m.cfg.defaultConfList(m.cfg.DefaultSubnet)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.cfg.ConfDir, 0o755); err != nil {
		return fmt.Errorf("create cni config dir: %w", err)
	}
	path := filepath.Join(m.cfg.ConfDir, DefaultConfFile)
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write default cni config: %w", err)
	}
	log.G(ctx).Info("wrote default cni network config", "file", path, "subnet", m.cfg.DefaultSubnet)
	return nil
}

// UpdatePodCIDR rewrites the default conflist with cidr as its range when
// ConfDir/10-podbay.conflist exists and is marked as podbay's. It is a no-op
// returning nil when the file is absent or is the operator's own, when cidr
// is empty (kubelet sends that before the node has a range), and when the
// file already has that range. cidr may be "v4CIDR,v6CIDR" (dual stack).
//
// The bridge plugin refuses a bridge that holds a gateway address other
// than its range's, so the change is made only while no pod is attached to
// the network's bridge: then the old addresses are removed from the bridge
// with the rewrite (the next pod's ADD gives it the new gateway). While pods
// of the old range are attached, it is deferred: new pods keep the old
// range, and the last pod's Teardown makes the change.
func (m *Manager) UpdatePodCIDR(ctx context.Context, cidr string) error {
	cidr = strings.TrimSpace(cidr)
	if cidr == "" {
		return nil
	}
	data, err := m.cfg.defaultConfList(cidr)
	if err != nil {
		return fmt.Errorf("update pod cidr: %w", err)
	}
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.pendingCIDR = ""
	path := filepath.Join(m.cfg.ConfDir, DefaultConfFile)
	cur, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update pod cidr: %w", err)
	}
	if !generatedByPodbay(cur) || bytes.Equal(cur, data) {
		return nil
	}
	bridge := conflistBridge(cur)
	if bridge != "" {
		attached, err := bridgePorts(ctx, bridge)
		if err != nil {
			return fmt.Errorf("update pod cidr: %w", err)
		}
		if attached > 0 {
			m.pendingCIDR = cidr
			log.G(ctx).Warn("pod cidr change deferred until the pods on the old range are gone",
				"file", path, "subnet", cidr, "bridge", bridge, "attached", attached)
			return nil
		}
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("update pod cidr: %w", err)
	}
	if bridge != "" {
		if err := flushBridgeAddrs(ctx, bridge); err != nil {
			return fmt.Errorf("update pod cidr: %w", err)
		}
	}
	log.G(ctx).Info("rewrote default cni network config", "file", path, "subnet", cidr)
	return nil
}

// applyPendingCIDR makes a deferred pod CIDR change once no pod is
// attached to the bridge any more; Teardown calls it.
func (m *Manager) applyPendingCIDR(ctx context.Context) {
	m.writeMu.Lock()
	cidr := m.pendingCIDR
	m.writeMu.Unlock()
	if cidr == "" {
		return
	}
	if err := m.UpdatePodCIDR(ctx, cidr); err != nil {
		log.G(ctx).Warn("deferred pod cidr change failed", "subnet", cidr, "err", err)
	}
}

// conflistBridge is the bridge of a conflist's first plugin, "" when it has
// none.
func conflistBridge(data []byte) string {
	var probe struct {
		Plugins []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
		} `json:"plugins"`
	}
	if json.Unmarshal(data, &probe) != nil || len(probe.Plugins) == 0 || probe.Plugins[0].Type != "bridge" {
		return ""
	}
	return probe.Plugins[0].Bridge
}

// bridgePorts counts the links attached to bridge (the pods' veths); 0 when
// the bridge does not exist.
func bridgePorts(ctx context.Context, bridge string) (int, error) {
	if _, err := net.InterfaceByName(bridge); err != nil {
		return 0, nil
	}
	out, err := exec.CommandContext(ctx, "ip", "-j", "link", "show", "master", bridge).Output()
	if err != nil {
		return 0, fmt.Errorf("list the ports of bridge %s: %w", bridge, err)
	}
	var links []json.RawMessage
	if len(bytes.TrimSpace(out)) > 0 {
		if err := json.Unmarshal(out, &links); err != nil {
			return 0, fmt.Errorf("list the ports of bridge %s: %w", bridge, err)
		}
	}
	return len(links), nil
}

// flushBridgeAddrs removes bridge's IPv4 and global IPv6 addresses (the old
// range's gateways), if the bridge exists.
func flushBridgeAddrs(ctx context.Context, bridge string) error {
	if _, err := net.InterfaceByName(bridge); err != nil {
		return nil
	}
	for _, args := range [][]string{{"-4", "addr", "flush", "dev", bridge}, {"-6", "addr", "flush", "dev", bridge, "scope", "global"}} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// generatedByPodbay reports whether a conflist carries podbay's marker.
func generatedByPodbay(data []byte) bool {
	var probe map[string]any
	if err := json.Unmarshal(data, &probe); err != nil {
		return false
	}
	return probe[generatedByKey] == generatedByValue
}
