package network

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"math"
	"os/exec"
	"testing"
)

// ifbName is the ifb device the bandwidth plugin makes for a pod's egress
// limit: "bwp" and the start of sha512(network name + container ID).
func ifbName(network, containerID string) string {
	sum := sha512.Sum512([]byte(network + containerID))
	return ("bwp" + hex.EncodeToString(sum[:]))[:15]
}

// qdiscKinds lists the kinds of dev's qdiscs ("tbf", "ingress", …); none
// when dev does not exist.
func qdiscKinds(t *testing.T, dev string) []string {
	t.Helper()
	out, err := exec.Command("tc", "-j", "qdisc", "show", "dev", dev).Output()
	if err != nil {
		return nil
	}
	var qs []struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		t.Fatalf("tc qdisc show dev %s: %v: %s", dev, err, out)
	}
	var kinds []string
	for _, q := range qs {
		kinds = append(kinds, q.Kind)
	}
	return kinds
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

func hasKind(kinds []string, kind string) bool {
	for _, k := range kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// TestIntegrationBandwidth checks that the default network's bandwidth
// plugin shapes a pod with limits and that Teardown removes the ifb device
// it made; a pod without limits gets no shaping.
func TestIntegrationBandwidth(t *testing.T) {
	e := newITEnv(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("tc not installed")
	}
	ctx := context.Background()

	plain := e.newPod(t)
	if _, err := e.m.Setup(ctx, plain); err != nil {
		t.Fatalf("Setup without limits: %v", err)
	}
	if linkExists(ifbName(e.netName, plain.ID)) {
		t.Error("pod without limits got an ifb device")
	}
	for _, v := range bridgePortsOf(t, e.bridge) {
		if k := qdiscKinds(t, v); hasKind(k, "tbf") {
			t.Errorf("pod without limits: veth %s has qdiscs %v", v, k)
		}
	}

	before := map[string]bool{}
	for _, v := range bridgePortsOf(t, e.bridge) {
		before[v] = true
	}
	att := e.newPod(t)
	att.Bandwidth = &Bandwidth{
		IngressRate: 10_000_000, IngressBurst: math.MaxUint32,
		EgressRate: 20_000_000, EgressBurst: math.MaxUint32,
	}
	if _, err := e.m.Setup(ctx, att); err != nil {
		t.Fatalf("Setup with limits: %v", err)
	}
	var veth string
	for _, v := range bridgePortsOf(t, e.bridge) {
		if !before[v] {
			veth = v
		}
	}
	if veth == "" {
		t.Fatal("no new veth on the bridge")
	}
	// Ingress (into the pod) is a tbf on the host veth; egress is redirected
	// from the veth's ingress qdisc to an ifb device with a tbf.
	if k := qdiscKinds(t, veth); !hasKind(k, "tbf") || !hasKind(k, "ingress") {
		t.Errorf("veth %s qdiscs %v, want tbf and ingress", veth, k)
	}
	ifb := ifbName(e.netName, att.ID)
	if k := qdiscKinds(t, ifb); !hasKind(k, "tbf") {
		t.Errorf("ifb %s qdiscs %v, want tbf", ifb, k)
	}

	if err := e.m.Teardown(ctx, att); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if linkExists(ifb) {
		t.Errorf("ifb %s left after Teardown", ifb)
	}
	if linkExists(veth) {
		t.Errorf("veth %s left after Teardown", veth)
	}
}

// bridgePortsOf lists the links enslaved to bridge.
func bridgePortsOf(t *testing.T, bridge string) []string {
	t.Helper()
	out, err := exec.Command("ip", "-j", "link", "show", "master", bridge).Output()
	if err != nil {
		t.Fatalf("ip link show master %s: %v", bridge, err)
	}
	var links []struct {
		IfName string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.IfName)
	}
	return names
}
