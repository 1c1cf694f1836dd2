package network

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// Settings are a sandbox's network settings, persisted with the sandbox and
// shown by inspect. The JSON field names are a fixed schema that inspect's
// readers depend on (docs/design.md, "Network settings"). Setup fills
// everything but SandboxID, SandboxKey and Activation, which belong to the
// caller.
type Settings struct {
	// Bridge is the host bridge the pod is attached to, when the network's
	// plugin is "bridge" and its result lists the bridge.
	Bridge     string `json:"Bridge"`
	SandboxID  string `json:"SandboxID"`
	SandboxKey string `json:"SandboxKey"`
	// EndpointID is the host side of the pod's link (the bridge plugin's
	// veth), when the result reports one.
	EndpointID string `json:"EndpointID"`

	// Gateway, IPAddress and IPPrefixLen are the primary (first) IPv4
	// address of the pod's interface.
	Gateway     string `json:"Gateway"`
	IPAddress   string `json:"IPAddress"`
	IPPrefixLen int    `json:"IPPrefixLen"`
	// IPv6Gateway, GlobalIPv6Address and GlobalIPv6PrefixLen are the primary
	// global IPv6 address.
	IPv6Gateway         string `json:"IPv6Gateway"`
	GlobalIPv6Address   string `json:"GlobalIPv6Address"`
	GlobalIPv6PrefixLen int    `json:"GlobalIPv6PrefixLen"`
	// MacAddress is the MAC of the pod's interface, inside the namespace.
	MacAddress string `json:"MacAddress"`
	// LinkLocalIPv6Address is set only when the CNI result lists an fe80::/10
	// address; plugins usually do not.
	LinkLocalIPv6Address   string `json:"LinkLocalIPv6Address"`
	LinkLocalIPv6PrefixLen int    `json:"LinkLocalIPv6PrefixLen"`

	// Ports are the hostPort mappings keyed "containerPort/protocol", as
	// Docker shows port bindings.
	Ports map[string][]PortBinding `json:"Ports,omitempty"`
	// CNIPorts are the same mappings as passed to CNI ("portMappings").
	CNIPorts []CNIPortMapping `json:"CNIPorts,omitempty"`
	// Activation reports whether the pod network is set up; the caller owns
	// it (true after Setup, false after Teardown).
	Activation bool `json:"Activation"`
	// Networks holds one entry per CNI network the pod is attached to, keyed
	// by network name.
	Networks map[string]*EndpointSettings `json:"Networks,omitempty"`
}

// PortBinding is one host binding of a container port.
type PortBinding struct {
	HostIP   string `json:"HostIp"`
	HostPort string `json:"HostPort"`
}

// EndpointSettings is the pod's attachment to one network.
type EndpointSettings struct {
	IFName     string `json:"IFName"`
	EndpointID string `json:"EndpointID"`
	MacAddress string `json:"MacAddress"`

	Gateway             string `json:"Gateway"`
	IPAddress           string `json:"IPAddress"`
	IPPrefixLen         int    `json:"IPPrefixLen"`
	IPv6Gateway         string `json:"IPv6Gateway"`
	GlobalIPv6Address   string `json:"GlobalIPv6Address"`
	GlobalIPv6PrefixLen int    `json:"GlobalIPv6PrefixLen"`
	// IPs are all the interface's addresses in CIDR form, as the result
	// lists them (link-local ones excluded).
	IPs []string `json:"IPs,omitempty"`
	// CNIResult is the result of the network's ADD, as the plugins returned
	// it (in the config's cniVersion).
	CNIResult json.RawMessage `json:"CNIResult,omitempty"`
}

// PodIPs returns the pod's addresses without prefix lengths: IPv4 before
// IPv6 (kubelet takes the first as the pod IP), the primary address of each
// family first, no duplicates.
func (s *Settings) PodIPs() []string {
	var v4, v6 []string
	seen := map[string]bool{}
	add := func(addr string) {
		ip, err := netip.ParseAddr(addr)
		if err != nil || seen[addr] {
			return
		}
		seen[addr] = true
		if ip.Is4() {
			v4 = append(v4, addr)
		} else {
			v6 = append(v6, addr)
		}
	}
	add(s.IPAddress)
	add(s.GlobalIPv6Address)
	names := make([]string, 0, len(s.Networks))
	for name := range s.Networks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, cidr := range s.Networks[name].IPs {
			addr, _, _ := strings.Cut(cidr, "/")
			add(addr)
		}
	}
	return append(v4, v6...)
}

func (s *Settings) setPorts(pms []CNIPortMapping) {
	s.CNIPorts = pms
	s.Ports = nil
	for _, pm := range pms {
		if s.Ports == nil {
			s.Ports = map[string][]PortBinding{}
		}
		key := fmt.Sprintf("%d/%s", pm.ContainerPort, pm.Protocol)
		s.Ports[key] = append(s.Ports[key], PortBinding{HostIP: pm.HostIP, HostPort: strconv.Itoa(int(pm.HostPort))})
	}
}

// resultMeta is what settingsFromResult needs besides the result.
type resultMeta struct {
	Network     string
	ContainerID string
	// IfName is the pod's interface, whose addresses are the pod's.
	IfName string
	// Bridge is the bridge the network's config names, if any.
	Bridge string
}

// settingsFromResult converts a CNI ADD result of any version to Settings.
// Only addresses of the pod's interface count: those whose "interface" index
// points at it, or that name no interface. The first IPv4 and the first
// global IPv6 address are the primary ones; a missing gateway is taken from
// the family's default route.
func settingsFromResult(res types.Result, meta resultMeta) (*Settings, error) {
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode cni result: %w", err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("convert cni result version %s: %w", res.Version(), err)
	}

	pod := podInterface(cur.Interfaces, meta.IfName)
	ep := &EndpointSettings{IFName: meta.IfName, CNIResult: raw}
	if pod >= 0 {
		ep.IFName = cur.Interfaces[pod].Name
		ep.MacAddress = cur.Interfaces[pod].Mac
	}
	s := &Settings{}
	for _, iface := range cur.Interfaces {
		if iface.Sandbox != "" {
			continue
		}
		switch {
		case meta.Bridge != "" && iface.Name == meta.Bridge:
			s.Bridge = iface.Name
		case ep.EndpointID == "":
			ep.EndpointID = iface.Name
		}
	}

	for _, ipc := range cur.IPs {
		if ipc == nil || (ipc.Interface != nil && pod >= 0 && *ipc.Interface != pod) {
			continue
		}
		ip := ipc.Address.IP
		prefix, _ := ipc.Address.Mask.Size()
		gw := ipc.Gateway
		if gw == nil {
			gw = defaultGateway(cur.Routes, ip.To4() != nil)
		}
		switch {
		case ip.To4() != nil:
			ep.IPs = append(ep.IPs, cidrString(ip.To4(), prefix))
			if ep.IPAddress == "" {
				ep.IPAddress, ep.IPPrefixLen, ep.Gateway = ip.To4().String(), prefix, ipString(gw)
			}
		case ip.IsLinkLocalUnicast():
			if s.LinkLocalIPv6Address == "" {
				s.LinkLocalIPv6Address, s.LinkLocalIPv6PrefixLen = ip.String(), prefix
			}
		default:
			ep.IPs = append(ep.IPs, cidrString(ip, prefix))
			if ep.GlobalIPv6Address == "" {
				ep.GlobalIPv6Address, ep.GlobalIPv6PrefixLen, ep.IPv6Gateway = ip.String(), prefix, ipString(gw)
			}
		}
	}

	s.EndpointID = ep.EndpointID
	s.MacAddress = ep.MacAddress
	s.IPAddress, s.IPPrefixLen, s.Gateway = ep.IPAddress, ep.IPPrefixLen, ep.Gateway
	s.GlobalIPv6Address, s.GlobalIPv6PrefixLen, s.IPv6Gateway = ep.GlobalIPv6Address, ep.GlobalIPv6PrefixLen, ep.IPv6Gateway
	s.Networks = map[string]*EndpointSettings{meta.Network: ep}
	return s, nil
}

// podInterface returns the index of the pod's interface: the one named
// ifName inside a sandbox, else the first one inside a sandbox, else -1.
func podInterface(ifaces []*types100.Interface, ifName string) int {
	first := -1
	for i, iface := range ifaces {
		if iface == nil || iface.Sandbox == "" {
			continue
		}
		if iface.Name == ifName {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	return first
}

func defaultGateway(routes []*types.Route, v4 bool) net.IP {
	for _, r := range routes {
		if r == nil || r.GW == nil || (r.GW.To4() != nil) != v4 {
			continue
		}
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			return r.GW
		}
	}
	return nil
}

func cidrString(ip net.IP, prefix int) string {
	return ip.String() + "/" + strconv.Itoa(prefix)
}

func ipString(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}
