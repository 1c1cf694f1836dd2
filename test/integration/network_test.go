package integration

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestHostNetworkPod: a pod on the node's network gets no namespace, no CNI
// attachment and no IP reservation.
func TestHostNetworkPod(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	// With its pause process, to see that it runs in the host's network
	// (TestPodWithoutPauseHostNetwork covers a host-network pod without).
	id := e.runPod(t, e.podConfig("hostnet", withHostNetwork(), withPause()), "")
	st, info := e.status(t, id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("state %v, want READY", st.State)
	}
	if info.NetworkMode != "host" {
		t.Errorf("networkMode %q, want host", info.NetworkMode)
	}
	if _, err := os.Stat(e.netnsPath(id)); !os.IsNotExist(err) {
		t.Errorf("%s: %v; a host-network pod must not get a namespace", e.netnsPath(id), err)
	}
	if info.NetworkSettings.SandboxKey != "" {
		t.Errorf("SandboxKey %q for a host-network pod", info.NetworkSettings.SandboxKey)
	}
	if owners := e.ipamOwners(); len(owners) != 0 {
		t.Errorf("IPs reserved for a host-network pod: %v", owners)
	}
	if calls := e.cniCalls(); len(calls) != 0 {
		t.Errorf("CNI was called for a host-network pod: %v", calls)
	}
	if ports := bridgePorts(e.bridge); len(ports) != 0 {
		t.Errorf("bridge ports for a host-network pod: %v", ports)
	}
	if info.Pid <= 0 {
		t.Fatalf("pause pid %d", info.Pid)
	}
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", info.Pid)), nsInode(t, "/proc/self/ns/net"); got != want {
		t.Errorf("pause process is not in the host network namespace")
	}
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}

// TestHostPort: a port mapping publishes the pod's port on the host through
// CNI's portmap plugin, and stop withdraws it: with an operator's network,
// and with one in the shape of podbay's own, which runs portmap only for
// pods with hostPorts (and so must for this one).
func TestHostPort(t *testing.T) {
	for _, opts := range []struct {
		name string
		envOptions
	}{{"operator's network", envOptions{}}, {"podbay's network", envOptions{podbayMasquerade: true}}} {
		t.Run(opts.name, func(t *testing.T) { testHostPort(t, opts.envOptions) })
	}
}

func testHostPort(t *testing.T, opts envOptions) {
	e := newEnv(t, opts)
	e.start("")

	hostPort := freePort(t)
	id := e.runPod(t, e.podConfig("hostport", withPortMapping(int32(hostPort), 8080)), "")
	st, _ := e.status(t, id)
	ip := e.requireIPInSubnet(t, podIP(st)).String()

	l := listenInPod(t, e.netnsPath(id), ":8080")
	go echoServer(l)
	defer l.Close()

	requireExchange(t, net.JoinHostPort(ip, "8080"), "direct")
	requireExchange(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)), "via-hostport")

	dport := "--dport " + strconv.Itoa(hostPort) + " "
	if rules := ruleLines(iptablesSave(t, "nat"), dport); len(rules) == 0 {
		t.Errorf("no nat rule for host port %d while the pod runs", hostPort)
	}

	// The listening socket holds the namespace: close it before stop so
	// the namespace can go.
	l.Close()
	e.stopPod(t, id)
	if rules := ruleLines(iptablesSave(t, "nat"), dport); len(rules) > 0 {
		t.Errorf("nat rules for host port %d left after stop:\n%v", hostPort, rules)
	}
	if rules := ruleLines(iptablesSave(t, "nat"), id); len(rules) > 0 {
		t.Errorf("nat rules naming %s left after stop:\n%v", short(id), rules)
	}
	e.removePod(t, id)
	e.assertNoLeaks(t)
}
