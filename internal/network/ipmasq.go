package network

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// The bridge and ptp plugins (Debian 12's 1.1.1, and upstream since) learn
// which addresses to un-masquerade on DEL by deleting the pod's interface
// inside the namespace. A DEL without a namespace releases the address but
// leaves the pod's nat chain CNI-<hash> and the POSTROUTING jump to it. When
// podbay runs such a DEL from a cached attachment, it removes that chain
// itself, using the addresses in the cached result and the names the plugins
// give the chain and its rules (plugins/pkg/utils FormatChainName and
// FormatComment).

// masqLeftover is one network's per-container masquerade chain.
type masqLeftover struct {
	chain, comment string
	ips            []net.IP
}

// masqLeftoverFor returns the chain an ipMasq bridge or ptp plugin in list
// made for containerID at the ADD that returned res, or nil when list has no
// such plugin.
func masqLeftoverFor(list *libcni.NetworkConfigList, containerID string, res types.Result) *masqLeftover {
	if res == nil || !usesIPMasq(list) {
		return nil
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil
	}
	l := &masqLeftover{
		chain:   ipMasqChainName(list.Name, containerID),
		comment: fmt.Sprintf("name: %q id: %q", list.Name, containerID),
	}
	for _, ipc := range cur.IPs {
		if ipc != nil {
			l.ips = append(l.ips, ipc.Address.IP)
		}
	}
	if len(l.ips) == 0 {
		return nil
	}
	return l
}

func usesIPMasq(list *libcni.NetworkConfigList) bool {
	for _, p := range list.Plugins {
		if p.Network.Type != "bridge" && p.Network.Type != "ptp" {
			continue
		}
		var conf struct {
			IPMasq bool `json:"ipMasq"`
		}
		if json.Unmarshal(p.Bytes, &conf) == nil && conf.IPMasq {
			return true
		}
	}
	return false
}

// ipMasqChainName is the plugins' FormatChainName: "CNI-" and the start of
// sha512(name+id), 28 characters in all (iptables' chain name limit).
func ipMasqChainName(network, containerID string) string {
	sum := sha512.Sum512([]byte(network + containerID))
	return fmt.Sprintf("CNI-%x", sum)[:28]
}

// remove deletes the POSTROUTING jumps for the chain's addresses and the
// chain, in each IP family that has addresses. A chain that is not there
// (the plugin removed it, or a reboot did) is skipped.
func (l *masqLeftover) remove(ctx context.Context) error {
	for _, fam := range []struct {
		bin string
		v4  bool
	}{{"iptables", true}, {"ip6tables", false}} {
		var ips []net.IP
		for _, ip := range l.ips {
			if (ip.To4() != nil) == fam.v4 {
				ips = append(ips, ip)
			}
		}
		if len(ips) == 0 {
			continue
		}
		bin, err := exec.LookPath(fam.bin)
		if err != nil {
			continue // without the binary the plugin could not have made the chain
		}
		if iptables(ctx, bin, "-t", "nat", "-S", l.chain) != nil {
			continue
		}
		for _, ip := range ips {
			// The jump may be gone already; -F/-X below report what matters.
			_ = iptables(ctx, bin, "-t", "nat", "-D", "POSTROUTING",
				"-s", ip.String(), "-j", l.chain, "-m", "comment", "--comment", l.comment)
		}
		if err := iptables(ctx, bin, "-t", "nat", "-F", l.chain); err != nil {
			return err
		}
		if err := iptables(ctx, bin, "-t", "nat", "-X", l.chain); err != nil {
			return err
		}
	}
	return nil
}

func iptables(ctx context.Context, bin string, args ...string) error {
	args = append([]string{"-w"}, args...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %w: %s", bin, args, err, out)
	}
	return nil
}
