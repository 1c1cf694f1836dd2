package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/podrequest"
)

// sandboxFiles are the per-pod files the sandbox and, later, its containers
// mount: /etc/resolv.conf, /etc/hostname and /etc/hosts.
type sandboxFiles struct {
	ResolvConf, Hostname, Hosts string
	// HostnameValue is the pod's hostname.
	HostnameValue string
}

const defaultHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// writeSandboxFiles writes the pod's resolv.conf, hostname and hosts into
// dir. With no DNS config the host's resolv.conf is used, as containerd
// does; a host-network pod gets the host's hostname and hosts.
func writeSandboxFiles(dir string, pod *podrequest.Pod, hostNetwork bool) (sandboxFiles, error) {
	f := sandboxFiles{
		ResolvConf: filepath.Join(dir, "resolv.conf"),
		Hostname:   filepath.Join(dir, "hostname"),
		Hosts:      filepath.Join(dir, "hosts"),
	}
	resolv, err := resolvConf(pod.DNS)
	if err != nil {
		return f, err
	}
	f.HostnameValue = pod.Hostname
	hosts := []byte(defaultHosts)
	if hostNetwork {
		if f.HostnameValue, err = os.Hostname(); err != nil {
			return f, fmt.Errorf("read host name: %w", err)
		}
		if b, err := os.ReadFile("/etc/hosts"); err == nil {
			hosts = b
		}
	}
	for _, w := range []struct {
		path string
		data []byte
	}{
		{f.ResolvConf, resolv},
		{f.Hostname, []byte(f.HostnameValue + "\n")},
		{f.Hosts, hosts},
	} {
		if err := os.WriteFile(w.path, w.data, 0o644); err != nil {
			return f, fmt.Errorf("write %s: %w", filepath.Base(w.path), err)
		}
	}
	return f, nil
}

// resolvConf renders a DNS config; nil or empty means the host's file.
func resolvConf(dns *network.DNS) ([]byte, error) {
	if dns == nil {
		dns = &network.DNS{}
	}
	if len(dns.Servers) == 0 && len(dns.Searches) == 0 && len(dns.Options) == 0 {
		b, err := os.ReadFile("/etc/resolv.conf")
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("read host resolv.conf: %w", err)
		}
		return b, nil
	}
	for _, list := range [][]string{dns.Servers, dns.Searches, dns.Options} {
		for _, v := range list {
			// One word each: a space or newline would add entries or
			// lines to the pod's resolv.conf that nobody asked for.
			if v == "" || strings.ContainsFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
				return nil, errInvalid(fmt.Sprintf("DNS config entry %q must be one word", v))
			}
		}
	}
	var b strings.Builder
	if len(dns.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(dns.Searches, " "))
	}
	for _, s := range dns.Servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(dns.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(dns.Options, " "))
	}
	return []byte(b.String()), nil
}
