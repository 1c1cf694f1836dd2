package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/network"
)

// TestPodbayMasquerade runs pods on a network shaped like podbay's default
// one (the bridge plugin's ipMasq off, podbayMasquerade on): the daemon
// masquerades the whole subnet with its own rules, no pod gets rules of its
// own, a pod reaches an address outside the subnet through the host, and
// the rules outlive daemon restarts while a pod runs and go with a clean
// stop that leaves no pod.
func TestPodbayMasquerade(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, envOptions{podbayMasquerade: true})
	e.start("")
	outside := newOutsideHost(t)
	chain := network.MasqueradeChain(e.netName)
	jump := fmt.Sprintf("-A POSTROUTING -s %s -m comment --comment \"podbay masquerade name: \\\"%s\\\"\" -j %s", e.subnet, e.netName, chain)

	id := e.runPod(t, e.podConfig("egress"), "")
	st, _ := e.status(t, id)
	e.requireIPInSubnet(t, podIP(st))
	nat := iptablesSave(t, "nat")
	if !strings.Contains(nat, jump) {
		t.Fatalf("no masquerade jump %q in the nat table:\n%s", jump, natLines(nat, e.netName))
	}
	if strings.Contains(nat, id) {
		t.Errorf("the pod has nat rules of its own (the plugin's ipMasq?):\n%s", natLines(nat, id))
	}
	requireEgress(t, e.netnsPath(id), outside)

	// Negative control: without podbay's jump the outside host cannot
	// answer the pod (it has no route to the pod subnet).
	if _, err := runCmd("iptables", "-w", "-t", "nat", "-D", "POSTROUTING", "-s", e.subnet.String(),
		"-m", "comment", "--comment", fmt.Sprintf("podbay masquerade name: %q", e.netName), "-j", chain); err != nil {
		t.Fatal(err)
	}
	if err := egress(e.netnsPath(id), outside); err == nil {
		t.Fatalf("the pod reached %s without podbay's masquerade: the test proves nothing", outside)
	}

	// A clean stop with a pod running keeps the rest of the rules; the
	// next start puts the missing jump back when it loads the config.
	e.stop()
	if nat := iptablesSave(t, "nat"); !strings.Contains(nat, "-A "+chain+" ! -d 224.0.0.0/4") {
		t.Errorf("a clean stop with a pod running removed the masquerade chain:\n%s", natLines(nat, e.netName))
	}
	e.start("")
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if _, err := e.rt.Status(ctx, &runtimeapi.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if nat := iptablesSave(t, "nat"); strings.Count(nat, jump) != 1 {
		t.Errorf("after the restart, want the jump once:\n%s", natLines(nat, e.netName))
	}
	requireEgress(t, e.netnsPath(id), outside)

	// A crash keeps them too.
	e.restart("")
	requireEgress(t, e.netnsPath(id), outside)

	e.stopAndRemove(t, id)
	e.assertNoLeaks(t) // the rules are the running daemon's
	e.stop()
	if nat := iptablesSave(t, "nat"); strings.Contains(nat, chain) {
		t.Errorf("a clean stop with no pods left the masquerade:\n%s", natLines(nat, chain))
	}
}

// newOutsideHost makes a network namespace linked to the host by a veth
// pair on a /30 of its own, with no route to anything else (so no route
// back to a pod's address), and returns its address.
func newOutsideHost(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	suffix := hex.EncodeToString(b)
	name, host := "pbout-"+suffix, "pbo"+suffix
	hostIP := net.IPv4(10, 196, b[0], b[1]&0xfc|1)
	outIP := net.IPv4(10, 196, b[0], b[1]&0xfc|2)
	t.Cleanup(func() {
		runCmd("ip", "link", "del", host)  //nolint:errcheck // gone with the namespace, maybe
		runCmd("ip", "netns", "del", name) //nolint:errcheck
	})
	for _, args := range [][]string{
		{"ip", "netns", "add", name},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"ip", "addr", "add", hostIP.String() + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "-n", name, "addr", "add", outIP.String() + "/30", "dev", "eth0"},
		{"ip", "-n", name, "link", "set", "eth0", "up"},
		{"ip", "-n", name, "link", "set", "lo", "up"},
	} {
		if _, err := runCmd(args[0], args[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	return outIP.String()
}

// egress pings dst once from the network namespace at netnsPath.
func egress(netnsPath, dst string) error {
	_, err := runCmd("nsenter", "--net="+netnsPath, "busybox", "ping", "-c1", "-W2", dst)
	return err
}

func requireEgress(t *testing.T, netnsPath, dst string) {
	t.Helper()
	if err := eventually(10*time.Second, func() error { return egress(netnsPath, dst) }); err != nil {
		t.Fatalf("the pod cannot reach %s outside its subnet: %v", dst, err)
	}
}

// natLines returns the lines of an iptables-save dump that contain s.
func natLines(dump, s string) string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
