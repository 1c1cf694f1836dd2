package network

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The integration tests run the real plugins from Debian's
// containernetworking-plugins against namespaces the tests create. They touch
// only what they make: a uniquely named network, bridge and /24, host-local
// state and libcni's cache in temp dirs, and the per-container iptables
// chains, all removed at the end. The plugins also enable
// net.ipv4.ip_forward and create portmap's shared CNI-HOSTPORT-* chains;
// those are host-wide and stay, as with any CNI runtime.

const systemPluginDir = "/usr/lib/cni"

func requireIntegration(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration test: needs root")
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "bandwidth", "loopback"} {
		if _, err := os.Stat(filepath.Join(systemPluginDir, p)); err != nil {
			t.Skipf("integration test: cni plugin %s not installed", p)
		}
	}
	for _, bin := range []string{"ip", "iptables-save"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("integration test: %s not installed", bin)
		}
	}
}

type itEnv struct {
	cfg     Config
	m       *Manager
	netName string
	bridge  string
	subnet  *net.IPNet
	ipamDir string // host-local's directory for this network
}

// newITEnv makes a private network: podbay's default conflist written into
// a temp ConfDir with a unique name, bridge and subnet.
func newITEnv(t *testing.T) *itEnv {
	t.Helper()
	requireIntegration(t)
	dir := t.TempDir()
	suffix := randHex(t, 3)
	subnet := freeSubnet(t)
	e := &itEnv{
		netName: "podbaytest-" + suffix,
		bridge:  "pbt" + suffix,
		subnet:  subnet,
	}
	e.cfg = Config{
		ConfDir:        filepath.Join(dir, "net.d"),
		PluginDirs:     []string{systemPluginDir},
		CacheDir:       filepath.Join(dir, "cache"),
		WriteDefault:   true,
		DefaultName:    e.netName,
		DefaultBridge:  e.bridge,
		DefaultSubnet:  subnet.String(),
		DefaultDataDir: filepath.Join(dir, "ipam"),
	}
	e.ipamDir = filepath.Join(e.cfg.DefaultDataDir, e.netName)
	t.Cleanup(func() {
		out, err := exec.Command("ip", "link", "del", e.bridge).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "Cannot find device") {
			t.Errorf("ip link del %s: %v: %s", e.bridge, err, out)
		}
	})
	m, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	// Loading the default conflist installs podbay's masquerade for the
	// subnet (podbayd removes it on a clean stop with no pods left).
	t.Cleanup(func() {
		if err := m.ReleaseMasquerade(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := m.Status(context.Background()); err != nil {
		t.Fatalf("Status: %v", err)
	}
	return e
}

// freeSubnet picks a random 10.199.X.0/24 that no host address is in.
func freeSubnet(t *testing.T) *net.IPNet {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		x, err := rand.Int(rand.Reader, big.NewInt(250))
		if err != nil {
			t.Fatal(err)
		}
		_, n, _ := net.ParseCIDR(fmt.Sprintf("10.199.%d.0/24", x.Int64()+1))
		used := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (n.Contains(ipn.IP) || ipn.Contains(n.IP)) {
				used = true
			}
		}
		if !used {
			return n
		}
	}
	t.Fatal("no free 10.199.X.0/24")
	return nil
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newPod makes a namespace and an attachment for it. A safety-net Teardown
// runs at the end of the test, before the namespace is removed.
func (e *itEnv) newPod(t *testing.T, ports ...PortMapping) Attachment {
	t.Helper()
	att := Attachment{
		ID:           randHex(t, 32),
		NetNS:        newTestNetNS(t),
		PodName:      "pod-" + randHex(t, 2),
		PodNamespace: "default",
		PodUID:       randHex(t, 16),
		PortMappings: ports,
	}
	t.Cleanup(func() {
		if err := e.m.Teardown(context.Background(), att); err != nil {
			t.Errorf("cleanup teardown %s: %v", att.ID, err)
		}
	})
	return att
}

// reservedIPs lists host-local's reservations for the network.
func (e *itEnv) reservedIPs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(e.ipamDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, en := range entries {
		if net.ParseIP(en.Name()) != nil {
			ips = append(ips, en.Name())
		}
	}
	return ips
}

var chainTarget = regexp.MustCompile(`-j (CNI-[A-Za-z0-9-]+)`)

// iptablesFor returns the iptables rules whose comment names the container,
// and the per-container chains they jump to.
func iptablesFor(t *testing.T, id string) (rules, chains []string) {
	t.Helper()
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, id) {
			continue
		}
		rules = append(rules, line)
		if m := chainTarget.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[1], "CNI-HOSTPORT-") {
			chains = append(chains, m[1])
		}
	}
	return rules, chains
}

func chainExists(t *testing.T, chain string) bool {
	t.Helper()
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	return strings.Contains(string(out), "\n:"+chain+" ")
}

func linkUp(name string) (bool, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return false, err
	}
	return iface.Flags&net.FlagUp != 0, nil
}

// freePort returns a TCP port nothing on the host listens on right now.
func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// serveInNetNS listens on port in the namespace and answers every
// connection with greeting.
func serveInNetNS(t *testing.T, netns string, port int, greeting string) {
	t.Helper()
	var ln net.Listener
	err := inNetNS(netns, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("listen in netns: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, greeting)
			c.Close()
		}
	}()
}

func dialGreeting(addr string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// hostPrimaryIP is the source address of the host's default route; no packet
// is sent.
func hostPrimaryIP() (string, error) {
	c, err := net.Dial("udp4", "192.0.2.1:9")
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func TestIntegrationSetupTeardown(t *testing.T) {
	e := newITEnv(t)
	ctx := context.Background()
	hostPort := freePort(t)
	att := e.newPod(t, PortMapping{HostPort: hostPort, ContainerPort: 8080, Protocol: "TCP"})

	start := time.Now()
	s, err := e.m.Setup(ctx, att)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Logf("Setup took %v", time.Since(start))

	ip := net.ParseIP(s.IPAddress)
	if ip == nil || !e.subnet.Contains(ip) {
		t.Fatalf("IPAddress %q not in %s", s.IPAddress, e.subnet)
	}
	if s.IPPrefixLen != 24 || s.Bridge != e.bridge || s.Gateway == "" || s.MacAddress == "" || s.EndpointID == "" {
		t.Errorf("settings: %+v", s)
	}
	if ep := s.Networks[e.netName]; ep == nil || ep.IFName != "eth0" || len(ep.CNIResult) == 0 {
		t.Errorf("Networks: %+v", s.Networks)
	}
	if got := s.PodIPs(); len(got) != 1 || got[0] != s.IPAddress {
		t.Errorf("PodIPs = %v", got)
	}
	if got := e.reservedIPs(t); len(got) != 1 || got[0] != s.IPAddress {
		t.Errorf("host-local reservations = %v, want [%s]", got, s.IPAddress)
	}

	err = inNetNS(att.NetNS, func() error {
		for _, name := range []string{"eth0", "lo"} {
			up, err := linkUp(name)
			if err != nil {
				return err
			}
			if !up {
				return fmt.Errorf("%s is down", name)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("links in netns: %v", err)
	}

	if _, err := exec.LookPath("busybox"); err == nil {
		out, err := exec.Command("busybox", "ping", "-c", "1", "-W", "2", s.IPAddress).CombinedOutput()
		if err != nil {
			t.Errorf("ping %s: %v: %s", s.IPAddress, err, out)
		}
	}

	serveInNetNS(t, att.NetNS, 8080, "hello from "+att.ID[:8]+"\n")
	want := "hello from " + att.ID[:8]
	if got, err := dialGreeting(net.JoinHostPort(s.IPAddress, "8080")); err != nil || got != want {
		t.Errorf("pod IP: got %q, %v", got, err)
	}
	if got, err := dialGreeting(fmt.Sprintf("127.0.0.1:%d", hostPort)); err != nil || got != want {
		t.Errorf("hostPort via 127.0.0.1: got %q, %v", got, err)
	}
	if hostIP, err := hostPrimaryIP(); err == nil {
		if got, err := dialGreeting(net.JoinHostPort(hostIP, fmt.Sprint(hostPort))); err != nil || got != want {
			t.Errorf("hostPort via %s: got %q, %v", hostIP, got, err)
		}
	} else {
		t.Logf("no default route, hostPort via the primary IP not checked: %v", err)
	}

	for _, knob := range []string{"ipv4/ip_forward", "ipv4/conf/" + e.bridge + "/route_localnet"} {
		v, _ := os.ReadFile("/proc/sys/net/" + knob)
		t.Logf("%s = %s", knob, strings.TrimSpace(string(v)))
	}

	// The default network masquerades with podbay's rules for the whole
	// subnet: the pod has its hostport chain and no masquerade chain.
	rules, chains := iptablesFor(t, att.ID)
	if len(rules) == 0 || len(chains) == 0 || slices.ContainsFunc(chains, func(c string) bool { return !strings.HasPrefix(c, "CNI-DN-") }) {
		t.Errorf("expected the pod's hostport chain alone, got rules %q chains %q", rules, chains)
	}
	if out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", MasqueradeChain(e.netName)).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "-j MASQUERADE") {
		t.Errorf("podbay's masquerade chain for %s: %v: %s", e.netName, err, out)
	}
	if c, err := e.m.Cached(); err != nil || len(c) != 1 || c[0].ID != att.ID || c[0].NetNS != att.NetNS {
		t.Errorf("Cached = %+v, %v", c, err)
	}

	start = time.Now()
	if err := e.m.Teardown(ctx, att); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	t.Logf("Teardown took %v", time.Since(start))

	if got := e.reservedIPs(t); len(got) != 0 {
		t.Errorf("reservations after Teardown: %v", got)
	}
	if rules, _ := iptablesFor(t, att.ID); len(rules) != 0 {
		t.Errorf("iptables rules left: %q", rules)
	}
	for _, c := range chains {
		if chainExists(t, c) {
			t.Errorf("chain %s left", c)
		}
	}
	err = inNetNS(att.NetNS, func() error {
		if _, err := net.InterfaceByName("eth0"); err == nil {
			return errors.New("eth0 still in the namespace")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if c, err := e.m.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached after Teardown = %+v, %v", c, err)
	}

	if err := e.m.Teardown(ctx, att); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
	noNS := att
	noNS.NetNS = ""
	if err := e.m.Teardown(ctx, noNS); err != nil {
		t.Errorf("Teardown without netns: %v", err)
	}
}

// TestIntegrationTeardownGoneNetNS tears down a pod whose namespace was
// unmounted first (the namespace file is kept, as Stop keeps it).
func TestIntegrationTeardownGoneNetNS(t *testing.T) {
	e := newITEnv(t)
	ctx := context.Background()
	att := e.newPod(t, PortMapping{HostPort: freePort(t), ContainerPort: 80})
	if _, err := e.m.Setup(ctx, att); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	_, chains := iptablesFor(t, att.ID)
	unmountNetNS(t, att.NetNS)

	// The stale path is passed on purpose: Teardown must see it is no
	// longer a namespace.
	if err := e.m.Teardown(ctx, att); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := e.reservedIPs(t); len(got) != 0 {
		t.Errorf("reservations after Teardown: %v", got)
	}
	rules, _ := iptablesFor(t, att.ID)
	for _, c := range chains {
		if chainExists(t, c) {
			rules = append(rules, ":"+c)
		}
	}
	if len(rules) != 0 {
		t.Errorf("iptables left after DEL without netns: %q", rules)
	}
}

func TestIntegrationTeardownUsesCachedConfig(t *testing.T) {
	e := newITEnv(t)
	ctx := context.Background()
	att := e.newPod(t)
	if _, err := e.m.Setup(ctx, att); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	// The operator replaces the network: a different name, plugin chain and
	// IPAM directory. DEL must still reach the network the pod was added to.
	other := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"%s-other","plugins":[{"type":"bridge","bridge":"%s","ipam":{"type":"host-local","subnet":"%s","dataDir":"%s"}}]}`,
		e.netName, e.bridge, e.subnet, t.TempDir())
	if err := os.Remove(filepath.Join(e.cfg.ConfDir, DefaultConfFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.cfg.ConfDir, "05-other.conflist"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Teardown(ctx, att); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := e.reservedIPs(t); len(got) != 0 {
		t.Errorf("reservations after Teardown: %v", got)
	}
	if rules, _ := iptablesFor(t, att.ID); len(rules) != 0 {
		t.Errorf("iptables rules left: %q", rules)
	}
}

func TestIntegrationRestartTeardownCached(t *testing.T) {
	e := newITEnv(t)
	ctx := context.Background()
	att := e.newPod(t, PortMapping{HostPort: freePort(t), ContainerPort: 80, Protocol: "udp"})
	if _, err := e.m.Setup(ctx, att); err != nil {
		t.Fatalf("Setup: %v", err)
	}

	// A daemon restart: a new Manager on the same dirs finds the attachment.
	m2, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := m2.Cached()
	if err != nil {
		t.Fatal(err)
	}
	if len(cached) != 1 || cached[0].ID != att.ID || cached[0].NetNS != att.NetNS || len(cached[0].Networks) != 1 {
		t.Fatalf("Cached = %+v", cached)
	}
	if err := m2.TeardownCached(ctx, cached[0]); err != nil {
		t.Fatalf("TeardownCached: %v", err)
	}
	if got := e.reservedIPs(t); len(got) != 0 {
		t.Errorf("reservations after TeardownCached: %v", got)
	}
	if rules, _ := iptablesFor(t, att.ID); len(rules) != 0 {
		t.Errorf("iptables rules left: %q", rules)
	}
	if c, err := m2.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached after TeardownCached = %+v, %v", c, err)
	}
	if err := m2.TeardownCached(ctx, cached[0]); err != nil {
		t.Errorf("second TeardownCached: %v", err)
	}
}

func TestIntegrationConcurrentPods(t *testing.T) {
	e := newITEnv(t)
	ctx := context.Background()
	const n = 20
	atts := make([]Attachment, n)
	for i := range atts {
		atts[i] = e.newPod(t, PortMapping{HostPort: freePort(t), ContainerPort: 80})
	}

	var wg sync.WaitGroup
	settings := make([]*Settings, n)
	errs := make([]error, n)
	start := time.Now()
	for i := range atts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			settings[i], errs[i] = e.m.Setup(ctx, atts[i])
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent Setups took %v", n, time.Since(start))
	seen := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Setup %d: %v", i, err)
		}
		ip := settings[i].IPAddress
		if seen[ip] || !e.subnet.Contains(net.ParseIP(ip)) {
			t.Errorf("pod %d: duplicate or foreign IP %s", i, ip)
		}
		seen[ip] = true
	}
	if got := e.reservedIPs(t); len(got) != n {
		t.Errorf("%d reservations, want %d", len(got), n)
	}

	start = time.Now()
	for i := range atts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.m.Teardown(ctx, atts[i])
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent Teardowns took %v", n, time.Since(start))
	for i, err := range errs {
		if err != nil {
			t.Errorf("Teardown %d: %v", i, err)
		}
	}
	if got := e.reservedIPs(t); len(got) != 0 {
		t.Errorf("reservations after Teardown: %v", got)
	}
	for _, att := range atts {
		if rules, _ := iptablesFor(t, att.ID); len(rules) != 0 {
			t.Errorf("iptables rules left for %s: %q", att.ID, rules)
		}
	}
}

// TestIntegrationFailedAddRollsBack chains a plugin that fails after bridge
// has made the veth and reserved an address: Setup must report the plugin's
// message and the network, and leave nothing behind.
func TestIntegrationFailedAddRollsBack(t *testing.T) {
	e := newITEnv(t)
	ctx := context.Background()
	pluginDir := t.TempDir()
	writeScript(t, filepath.Join(pluginDir, "failer"), failingPlugin)
	cfg := e.cfg
	cfg.PluginDirs = []string{pluginDir, systemPluginDir}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m

	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"%s","plugins":[
		{"type":"bridge","bridge":"%s","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","subnet":"%s","dataDir":"%s"}},
		{"type":"failer"}]}`, e.netName, e.bridge, e.subnet, e.cfg.DefaultDataDir)
	if err := os.WriteFile(filepath.Join(e.cfg.ConfDir, "01-failing.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	att := e.newPod(t)
	_, err = e.m.Setup(ctx, att)
	if err == nil {
		t.Fatal("Setup succeeded with a failing plugin")
	}
	for _, want := range []string{"injected plugin failure", e.netName, "01-failing.conflist"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if got := e.reservedIPs(t); len(got) != 0 {
		t.Errorf("reservations after failed Setup: %v", got)
	}
	if rules, _ := iptablesFor(t, att.ID); len(rules) != 0 {
		t.Errorf("iptables rules left: %q", rules)
	}
	err = inNetNS(att.NetNS, func() error {
		if _, err := net.InterfaceByName("eth0"); err == nil {
			return errors.New("eth0 left in the namespace")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if c, err := e.m.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached after failed Setup = %+v, %v", c, err)
	}
}
