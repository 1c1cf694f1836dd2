package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/undo"
)

// loopbackNetwork and loopbackIfName are the network an earlier podbay
// added every pod's "lo" to with the loopback plugin (containerd's names).
// Setup brings "lo" up itself now; Teardown still DELs that network where
// libcni's cache has it, for the pods of that podbay.
const (
	loopbackNetwork = "cni-loopback"
	loopbackIfName  = "lo"
)

// loopbackList is the loopback plugin's network, as a one-plugin list.
// Teardown's DEL of an earlier podbay's "lo" goes through it: libcni's
// list DEL drops a cache entry it cannot read (a daemon killed while
// libcni wrote it leaves it torn) and still runs the plugin, where the
// single-network DEL fails on it for ever, and the pod with it.
var loopbackList = func() *libcni.NetworkConfigList {
	conf, err := libcni.ConfFromBytes([]byte(
		`{"cniVersion":"` + defaultCNIVersion + `","name":"` + loopbackNetwork + `","type":"loopback"}`))
	if err != nil {
		panic(err)
	}
	list, err := libcni.ConfListFromConf(conf)
	if err != nil {
		panic(err)
	}
	return list
}()

// Attachment is one pod's attachment to the pod network.
type Attachment struct {
	// ID is the sandbox ID, used as the CNI container ID.
	ID string
	// NetNS is the path of the pod's network namespace. Setup requires it.
	// On teardown it may be "" when the namespace is gone (the CNI spec lets
	// DEL run without one); a path that is no longer a namespace mount is
	// treated as "".
	NetNS string

	// PodName, PodNamespace and PodUID go to the plugins in CNI_ARGS as
	// K8S_POD_NAME, K8S_POD_NAMESPACE and K8S_POD_UID, with
	// K8S_POD_INFRA_CONTAINER_ID=ID and IgnoreUnknown=1, as kubelet's
	// dockershim and containerd pass them.
	PodName      string
	PodNamespace string
	PodUID       string

	// PortMappings are the pod's hostPorts, passed as the "portMappings"
	// capability. Entries with HostPort <= 0 are not mappings and are
	// dropped.
	PortMappings []PortMapping
	// Bandwidth, when set, is passed as the "bandwidth" capability.
	Bandwidth *Bandwidth
	// DNS, when set, is passed as the "dns" capability.
	DNS *DNS
}

// PortMapping maps a host port to a port in the pod.
type PortMapping struct {
	HostPort      int32
	ContainerPort int32
	// Protocol is tcp, udp or sctp, in any case; "" means tcp.
	Protocol string
	// HostIP is the host address to bind; "" means all.
	HostIP string
}

// Bandwidth limits the pod's traffic, in bits per second and bits.
type Bandwidth struct {
	IngressRate, IngressBurst uint64
	EgressRate, EgressBurst   uint64
}

// DNS is the pod's resolver configuration.
type DNS struct {
	Servers, Searches, Options []string
}

// CNIPortMapping is a port mapping in the CNI "portMappings" capability's
// format; Settings.CNIPorts holds them.
type CNIPortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

type cniBandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

type cniDNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Setup brings the namespace's "lo" up (as the loopback plugin would, see
// loopbackUp) and runs CNI ADD of the default network (the first usable
// config in ConfDir, in lexical order, like kubelet and containerd) into
// att.NetNS, and returns the pod's network settings. SandboxID, SandboxKey
// and Activation are left for the caller.
//
// When no usable config exists the error is a *NoConfigError, classified as
// errdefs.ErrFailedPrecondition. A plugin failure is returned with the
// plugin's message and the network's name and file. A failed Setup has
// already run DEL for what it attempted (an ADD that failed half way may have
// created a veth or reserved an address), so it leaves nothing behind; a
// Teardown after it is harmless.
func (m *Manager) Setup(ctx context.Context, att Attachment) (_ *Settings, retErr error) {
	if att.NetNS == "" {
		return nil, fmt.Errorf("%w: network setup for %s: no network namespace", errdefs.ErrInvalidArgument, att.ID)
	}
	rt, err := m.runtimeConf(att, att.NetNS)
	if err != nil {
		return nil, err
	}
	snap, err := m.config(ctx)
	if err != nil {
		return nil, err
	}
	sel := snap.selected
	// podbay's own network without the plugins this pod has no use for;
	// libcni caches the list with the ADD, and Teardown's DEL uses that.
	list := sel.trimmed.forCaps(sel.list, rt.CapabilityArgs)
	start := time.Now()

	// "lo" goes with the namespace: nothing to undo.
	if err := m.loopbackUp(att.NetNS); err != nil {
		return nil, fmt.Errorf("network setup for %s: %w", att.ID, err)
	}
	// An ADD that failed half way may have created a veth or reserved an
	// address: DEL what was attempted.
	defer undo.OnError(log.With(ctx, "id", att.ID), &retErr, "cni del after failed add", func(ctx context.Context) error {
		return m.cni.DelNetworkList(ctx, list, rt)
	})
	res, err := m.cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		return nil, fmt.Errorf("cni add network %q (%s) for %s: %w", sel.list.Name, sel.file, att.ID, err)
	}
	settings, err := settingsFromResult(res, resultMeta{
		Network:     sel.list.Name,
		ContainerID: att.ID,
		IfName:      m.cfg.IfName,
		Bridge:      sel.bridge,
	})
	if err != nil {
		return nil, fmt.Errorf("cni add network %q (%s) for %s: %w", sel.list.Name, sel.file, att.ID, err)
	}
	settings.setPorts(cniPortMappings(att.PortMappings))
	log.G(ctx).Debug("pod network set up", "id", att.ID, "network", sel.list.Name,
		"ips", settings.PodIPs(), "duration", time.Since(start))
	return settings, nil
}

// Teardown runs CNI DEL for att. For each network libcni has a cached ADD
// for att.ID (the default network, and "lo" of an earlier podbay's pod),
// DEL uses the cached config and arguments, because the operator may have
// changed ConfDir since the ADD. When
// the default network has no cache entry (the ADD failed, or predates the
// cache), DEL uses the current config with att's arguments.
//
// Teardown is idempotent: DEL of something never added or already deleted
// succeeds, and att.NetNS may be "". With no cache entry and no usable
// config there is nothing to run DEL with; that is logged and not an error.
func (m *Manager) Teardown(ctx context.Context, att Attachment) error {
	netns := usableNetNS(att.NetNS)
	rt, err := m.runtimeConf(att, netns)
	if err != nil {
		return err
	}
	cached, err := m.cni.GetCachedAttachments(att.ID)
	if err != nil {
		return fmt.Errorf("cni teardown %s: read cache: %w", att.ID, err)
	}
	var errs []error
	haveMain, haveLo := false, false
	for _, c := range orderForDel(cached) {
		if c.Network == loopbackNetwork {
			haveLo = true
		} else {
			haveMain = true
		}
		errs = append(errs, m.delCached(ctx, c, netns))
	}
	if !haveMain {
		errs = append(errs, m.delCurrent(ctx, rt))
	}
	// An earlier podbay's "lo" entry that libcni could not read (torn).
	if !haveLo && m.loopbackCacheFile(att.ID) {
		lo := &libcni.RuntimeConf{ContainerID: rt.ContainerID, NetNS: rt.NetNS, IfName: loopbackIfName, Args: rt.Args}
		if err := m.cni.DelNetworkList(ctx, loopbackList, lo); err != nil {
			errs = append(errs, fmt.Errorf("cni del network %q for %s: %w", loopbackNetwork, att.ID, err))
		}
	}
	m.applyPendingCIDR(ctx)
	return errors.Join(errs...)
}

// loopbackCacheFile reports whether libcni's cache holds a "lo" entry of
// pod id, readable or not.
func (m *Manager) loopbackCacheFile(id string) bool {
	_, err := os.Lstat(filepath.Join(m.cfg.CacheDir, "results", loopbackNetwork+"-"+id+"-"+loopbackIfName))
	return err == nil
}

// delCurrent runs DEL with the current default network.
func (m *Manager) delCurrent(ctx context.Context, rt *libcni.RuntimeConf) error {
	snap, err := m.config(ctx)
	var noConf *NoConfigError
	if errors.As(err, &noConf) {
		log.G(ctx).Warn("no cached or current cni config to tear down with; skipping DEL",
			"id", rt.ContainerID, "reason", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("cni teardown %s: %w", rt.ContainerID, err)
	}
	sel := snap.selected
	if err := m.cni.DelNetworkList(ctx, sel.list, rt); err != nil {
		return fmt.Errorf("cni del network %q (%s) for %s: %w", sel.list.Name, sel.file, rt.ContainerID, err)
	}
	return nil
}

// delCached runs DEL for a cached attachment with its cached config and
// arguments, in netns ("" when the namespace is gone).
func (m *Manager) delCached(ctx context.Context, c *libcni.NetworkAttachment, netns string) error {
	list, err := cachedConfList(c.Config)
	if err != nil {
		return fmt.Errorf("cni del network %q (cached config) for %s: %w", c.Network, c.ContainerID, err)
	}
	rt := &libcni.RuntimeConf{
		ContainerID:    c.ContainerID,
		NetNS:          netns,
		IfName:         c.IfName,
		Args:           c.CniArgs,
		CapabilityArgs: c.CapabilityArgs,
	}
	var masq *masqLeftover
	if netns == "" {
		// Read before DEL, which drops the cache entry.
		if res, err := m.cni.GetNetworkListCachedResult(list, rt); err == nil {
			masq = masqLeftoverFor(list, c.ContainerID, res)
		}
	}
	if err := m.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("cni del network %q (cached config) for %s: %w", c.Network, c.ContainerID, err)
	}
	if masq != nil {
		if err := masq.remove(ctx); err != nil {
			return fmt.Errorf("cni del network %q for %s: remove masquerade chain %s: %w", c.Network, c.ContainerID, masq.chain, err)
		}
	}
	return nil
}

// cachedConfList parses the config libcni cached at ADD: the list's bytes for
// a list, the plugin's bytes for a single network (as for "lo").
func cachedConfList(data []byte) (*libcni.NetworkConfigList, error) {
	if list, err := libcni.ConfListFromBytes(data); err == nil {
		return list, nil
	}
	conf, err := libcni.ConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromConf(conf)
}

// orderForDel puts "lo" last: DEL runs in the reverse of ADD's order.
func orderForDel(atts []*libcni.NetworkAttachment) []*libcni.NetworkAttachment {
	out := make([]*libcni.NetworkAttachment, 0, len(atts))
	var lo []*libcni.NetworkAttachment
	for _, a := range atts {
		if a.Network == loopbackNetwork {
			lo = append(lo, a)
			continue
		}
		out = append(out, a)
	}
	return append(out, lo...)
}

// runtimeConf builds the per-invocation arguments of att for the default
// network's interface.
func (m *Manager) runtimeConf(att Attachment, netns string) (*libcni.RuntimeConf, error) {
	if err := utils.ValidateContainerID(att.ID); err != nil {
		return nil, fmt.Errorf("%w: cni container id %q: %s", errdefs.ErrInvalidArgument, att.ID, err.Msg)
	}
	args, err := cniArgs(att)
	if err != nil {
		return nil, err
	}
	caps, err := capabilityArgs(att)
	if err != nil {
		return nil, err
	}
	return &libcni.RuntimeConf{
		ContainerID:    att.ID,
		NetNS:          netns,
		IfName:         m.cfg.IfName,
		Args:           args,
		CapabilityArgs: caps,
	}, nil
}

// cniArgs builds CNI_ARGS. IgnoreUnknown=1 comes first so that plugins that
// parse CNI_ARGS strictly accept the K8S_* keys (CNI conventions).
func cniArgs(att Attachment) ([][2]string, error) {
	args := [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", att.PodNamespace},
		{"K8S_POD_NAME", att.PodName},
		{"K8S_POD_INFRA_CONTAINER_ID", att.ID},
		{"K8S_POD_UID", att.PodUID},
	}
	for _, kv := range args {
		// CNI_ARGS is "K=V;K=V": a value with ';' or '=' would corrupt it.
		if strings.ContainsAny(kv[1], ";=") {
			return nil, fmt.Errorf("%w: cni arg %s=%q contains ';' or '='", errdefs.ErrInvalidArgument, kv[0], kv[1])
		}
	}
	return args, nil
}

// capabilityArgs builds the runtimeConfig capabilities; libcni passes each
// only to plugins that declare it.
func capabilityArgs(att Attachment) (map[string]any, error) {
	caps := map[string]any{}
	for _, pm := range att.PortMappings {
		if pm.HostPort <= 0 {
			continue
		}
		if pm.HostPort > 65535 || pm.ContainerPort <= 0 || pm.ContainerPort > 65535 {
			return nil, fmt.Errorf("%w: port mapping %d->%d out of range",
				errdefs.ErrInvalidArgument, pm.HostPort, pm.ContainerPort)
		}
		switch strings.ToLower(pm.Protocol) {
		case "", "tcp", "udp", "sctp":
		default:
			return nil, fmt.Errorf("%w: port mapping protocol %q", errdefs.ErrInvalidArgument, pm.Protocol)
		}
	}
	if pms := cniPortMappings(att.PortMappings); len(pms) > 0 {
		caps["portMappings"] = pms
	}
	if b := att.Bandwidth; b != nil {
		caps["bandwidth"] = cniBandwidth{
			IngressRate: b.IngressRate, IngressBurst: b.IngressBurst,
			EgressRate: b.EgressRate, EgressBurst: b.EgressBurst,
		}
	}
	if d := att.DNS; d != nil {
		caps["dns"] = cniDNS{Servers: d.Servers, Searches: d.Searches, Options: d.Options}
	}
	if len(caps) == 0 {
		return nil, nil
	}
	return caps, nil
}

// cniPortMappings converts the hostPort mappings to the CNI format:
// lower-case protocol, tcp by default; entries without a host port dropped.
func cniPortMappings(pms []PortMapping) []CNIPortMapping {
	var out []CNIPortMapping
	for _, pm := range pms {
		if pm.HostPort <= 0 {
			continue
		}
		proto := strings.ToLower(pm.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		out = append(out, CNIPortMapping{
			HostPort:      pm.HostPort,
			ContainerPort: pm.ContainerPort,
			Protocol:      proto,
			HostIP:        pm.HostIP,
		})
	}
	return out
}
