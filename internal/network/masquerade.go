package network

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// podbay's default network masquerades its pods' egress with one rule set
// per subnet that podbay owns, instead of the bridge plugin's ipMasq, which
// adds a chain and a POSTROUTING rule per pod at ADD and removes them at
// DEL (~15 ms and ~50 ms with iptables-nft on a small VM, per pod). The
// default conflist says so with ipMasq false and the top-level key
// podbayMasquerade; the Manager installs the rules when it loads such a
// config (idempotently: at every start and reload) and leaves them in place
// while pods may use them, across daemon restarts. ReleaseMasquerade takes
// them away; podbayd calls it on a clean stop that leaves no pod with an
// attached network (so a host without podbayd running and without pods
// holds none of them). An operator's own conflist with ipMasq keeps the
// plugin's per-pod rules.
//
// The rules are the bridge plugin's, with the subnet for the pod's
// address, in the nat table of each family the subnet has:
//
//	-A POSTROUTING -s SUBNET -m comment --comment C -j PODBAY-MASQ-<hash>
//	-A PODBAY-MASQ-<hash> -d SUBNET -m comment --comment C -j ACCEPT
//	-A PODBAY-MASQ-<hash> ! -d 224.0.0.0/4 -m comment --comment C -j MASQUERADE
//
// (ff00::/8 for IPv6), where C is `podbay masquerade name: "NETWORK"`.

const (
	// masqueradeKey is the default conflist's top-level key that hands
	// its masquerade to podbay; libcni ignores unknown top-level keys.
	masqueradeKey = "podbayMasquerade"
	// MasqueradeChainPrefix starts the name of podbay's masquerade chains.
	MasqueradeChainPrefix = "PODBAY-MASQ-"
	// MasqueradeCommentPrefix starts the comment on every masquerade rule.
	MasqueradeCommentPrefix = "podbay masquerade"
)

// masquerade is the rule set of one podbay network.
type masquerade struct {
	network string
	subnets []*net.IPNet
}

// MasqueradeChain is the name of network's masquerade chain: the prefix
// and the start of sha256(network), 24 characters (iptables allows 28).
func MasqueradeChain(network string) string {
	sum := sha256.Sum256([]byte(network))
	return fmt.Sprintf("%s%x", MasqueradeChainPrefix, sum[:6])
}

func masqueradeComment(network string) string {
	return fmt.Sprintf("%s name: %q", MasqueradeCommentPrefix, network)
}

// masqueradeFor returns the rule set list asks podbay for, or nil when
// list is not a default network of podbay's with podbayMasquerade set.
func masqueradeFor(list *libcni.NetworkConfigList) *masquerade {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(list.Bytes, &top); err != nil {
		return nil
	}
	var on bool
	if json.Unmarshal(top[masqueradeKey], &on) != nil || !on || !generatedByPodbay(list.Bytes) {
		return nil
	}
	m := &masquerade{network: list.Name}
	for _, p := range list.Plugins {
		if p.Network.Type != "bridge" {
			continue
		}
		var conf struct {
			IPAM struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil {
			return nil
		}
		for _, set := range conf.IPAM.Ranges {
			for _, r := range set {
				if _, n, err := net.ParseCIDR(r.Subnet); err == nil {
					m.subnets = append(m.subnets, n)
				}
			}
		}
	}
	if len(m.subnets) == 0 {
		return nil
	}
	return m
}

// masqFamily is one IP family's iptables binary and multicast range.
type masqFamily struct {
	bin       string
	v4        bool
	multicast string
}

var masqFamilies = []masqFamily{{"iptables", true, "224.0.0.0/4"}, {"ip6tables", false, "ff00::/8"}}

// ensure installs what is missing of the rule set; rules already there
// are left alone, so that it is cheap to repeat and never opens a gap.
func (m *masquerade) ensure(ctx context.Context) error {
	chain, comment := MasqueradeChain(m.network), masqueradeComment(m.network)
	for _, fam := range masqFamilies {
		var subnets []*net.IPNet
		for _, n := range m.subnets {
			if (n.IP.To4() != nil) == fam.v4 {
				subnets = append(subnets, n)
			}
		}
		if len(subnets) == 0 {
			continue
		}
		bin, err := exec.LookPath(fam.bin)
		if err != nil {
			return fmt.Errorf("masquerade for network %q: %w", m.network, err)
		}
		if iptables(ctx, bin, "-t", "nat", "-S", chain) != nil {
			if err := iptables(ctx, bin, "-t", "nat", "-N", chain); err != nil {
				// Another podbayd (or a reload) may have made it meanwhile.
				if iptables(ctx, bin, "-t", "nat", "-S", chain) != nil {
					return fmt.Errorf("masquerade for network %q: %w", m.network, err)
				}
			}
		}
		// Chain rules first, then the jumps into the chain: a packet never
		// meets a half-made chain.
		var rules [][]string
		for _, n := range subnets {
			rules = append(rules, []string{chain, "-d", n.String(), "-m", "comment", "--comment", comment, "-j", "ACCEPT"})
		}
		rules = append(rules, []string{chain, "!", "-d", fam.multicast, "-m", "comment", "--comment", comment, "-j", "MASQUERADE"})
		for _, n := range subnets {
			rules = append(rules, []string{"POSTROUTING", "-s", n.String(), "-m", "comment", "--comment", comment, "-j", chain})
		}
		for _, r := range rules {
			if iptables(ctx, bin, append([]string{"-t", "nat", "-C"}, r...)...) == nil {
				continue
			}
			if err := iptables(ctx, bin, append([]string{"-t", "nat", "-A"}, r...)...); err != nil {
				return fmt.Errorf("masquerade for network %q: %w", m.network, err)
			}
		}
	}
	return nil
}

// RemoveMasquerade removes network's masquerade rules and chain in both
// families: the POSTROUTING jumps first (whatever subnets they name, so
// that a subnet the config no longer has goes too), then the chain. What
// is not there is skipped, so it is idempotent.
func RemoveMasquerade(ctx context.Context, network string) error {
	chain := MasqueradeChain(network)
	var errs []error
	for _, fam := range masqFamilies {
		bin, err := exec.LookPath(fam.bin)
		if err != nil {
			continue // without the binary there are no rules
		}
		out, err := exec.CommandContext(ctx, bin, "-w", "-t", "nat", "-S", "POSTROUTING").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s -t nat -S POSTROUTING: %w", bin, err))
			continue
		}
		for _, args := range jumpsTo(out, chain) {
			if err := iptables(ctx, bin, append([]string{"-t", "nat", "-D"}, args...)...); err != nil {
				errs = append(errs, err)
			}
		}
		if iptables(ctx, bin, "-t", "nat", "-S", chain) != nil {
			continue
		}
		if err := iptables(ctx, bin, "-t", "nat", "-F", chain); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := iptables(ctx, bin, "-t", "nat", "-X", chain); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove masquerade for network %q: %w", network, err)
	}
	return nil
}

// jumpsTo returns, from `iptables -S POSTROUTING` output, the rules that
// jump to chain, as arguments for -D (chain name first).
func jumpsTo(out []byte, chain string) [][]string {
	var rules [][]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f, err := splitRule(sc.Text())
		if err != nil || len(f) < 2 || f[0] != "-A" {
			continue
		}
		if i := slices.Index(f, "-j"); i < 0 || i+1 >= len(f) || f[i+1] != chain {
			continue
		}
		rules = append(rules, f[1:])
	}
	return rules
}

// splitRule splits a line of `iptables -S` into words, undoing its
// double quotes (comments with spaces come quoted, with \" inside).
func splitRule(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool
		have  bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case in && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			in = !in
			have = true
		case c == ' ' && !in:
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if have {
		words = append(words, cur.String())
	}
	return words, nil
}

// ensureMasquerade installs the masquerade list asks podbay for, if any.
func (m *Manager) ensureMasquerade(ctx context.Context, list *libcni.NetworkConfigList) error {
	mq := masqueradeFor(list)
	if mq == nil {
		return nil
	}
	m.masqMu.Lock()
	defer m.masqMu.Unlock()
	if err := mq.ensure(ctx); err != nil {
		return err
	}
	if m.masqNets == nil {
		m.masqNets = map[string]bool{}
	}
	m.masqNets[mq.network] = true
	return nil
}

// ReleaseMasquerade removes the masquerade of every network this Manager
// installed one for and of every network in ConfDir that asks podbay for
// one (a previous run may have installed it; this one may not have loaded
// the config, as a Stop or Remove tears down with the cached config). Other
// networks' rules (another podbayd's, on another ConfDir) are left alone.
// The caller makes sure that no pod needs them: podbayd calls it on a
// clean stop that leaves no pod with an attached network. The next load of
// the config installs them again.
func (m *Manager) ReleaseMasquerade(ctx context.Context) error {
	m.masqMu.Lock()
	defer m.masqMu.Unlock()
	nets := map[string]bool{}
	for n := range m.masqNets {
		nets[n] = true
	}
	names, err := confFileNames(m.cfg.ConfDir)
	if err != nil {
		return fmt.Errorf("release masquerade: read cni config dir: %w", err)
	}
	for _, name := range names {
		if list, err := loadConfFile(filepath.Join(m.cfg.ConfDir, name)); err == nil {
			if mq := masqueradeFor(list); mq != nil {
				nets[mq.network] = true
			}
		}
	}
	var errs []error
	for n := range nets {
		if err := RemoveMasquerade(ctx, n); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(m.masqNets, n)
	}
	// The next Setup loads the config again, which installs them again.
	m.loaded.Store(nil)
	return errors.Join(errs...)
}
