package integration

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	ingressBandwidth = "kubernetes.io/ingress-bandwidth"
	egressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// qdiscs lists the kinds of dev's qdiscs (nil when dev does not exist) and
// the rate of its tbf qdisc in bytes per second (0 without one).
func qdiscs(t *testing.T, dev string) (kinds []string, tbfRate uint64) {
	t.Helper()
	out, err := exec.Command("tc", "-j", "qdisc", "show", "dev", dev).Output()
	if err != nil {
		return nil, 0
	}
	var qs []struct {
		Kind    string `json:"kind"`
		Options struct {
			Rate uint64 `json:"rate"`
		} `json:"options"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		t.Fatalf("tc qdisc show dev %s: %v: %s", dev, err, out)
	}
	for _, q := range qs {
		kinds = append(kinds, q.Kind)
		if q.Kind == "tbf" {
			tbfRate = q.Options.Rate
		}
	}
	return kinds, tbfRate
}

// recordedRuntimeConfig is the runtimeConfig podbay-failcni got in the ADD
// for sandbox id.
type recordedRuntimeConfig struct {
	Bandwidth *struct {
		IngressRate  uint64 `json:"ingressRate"`
		IngressBurst uint64 `json:"ingressBurst"`
		EgressRate   uint64 `json:"egressRate"`
		EgressBurst  uint64 `json:"egressBurst"`
	} `json:"bandwidth"`
	DNS *struct {
		Servers  []string `json:"servers"`
		Searches []string `json:"searches"`
		Options  []string `json:"options"`
	} `json:"dns"`
}

func (e *env) runtimeConfigOf(t *testing.T, id string) recordedRuntimeConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.cniCtlDir, "runtimeConfig", id+".json"))
	if err != nil {
		t.Fatalf("runtimeConfig podbay-failcni recorded: %v", err)
	}
	var rc recordedRuntimeConfig
	if err := json.Unmarshal(data, &rc); err != nil {
		t.Fatalf("runtimeConfig %s: %v", data, err)
	}
	return rc
}

// TestNetworkBandwidth: the bandwidth annotations reach the CNI bandwidth
// plugin, which shapes the pod's traffic (a tbf on the host veth for
// ingress, an ifb device with a tbf for egress), and stopping the pod takes
// the shaping away.
func TestNetworkBandwidth(t *testing.T) {
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("tc not installed")
	}
	e := newEnv(t, envOptions{})
	e.start("")

	id := e.runPod(t, e.podConfig("shaped",
		withAnnotation(ingressBandwidth, "10M"), withAnnotation(egressBandwidth, "20M")), "")

	rc := e.runtimeConfigOf(t, id)
	if b := rc.Bandwidth; b == nil || b.IngressRate != 10_000_000 || b.EgressRate != 20_000_000 ||
		b.IngressBurst != math.MaxUint32 || b.EgressBurst != math.MaxUint32 {
		t.Errorf("bandwidth runtimeConfig %+v, want rates 10M and 20M with bursts MaxUint32", b)
	}
	veths := bridgePorts(e.bridge)
	if len(veths) != 1 {
		t.Fatalf("bridge ports %v, want the pod's veth", veths)
	}
	veth, ifb := veths[0], ifbName(e.netName, id)
	// tc reports rates in bytes per second.
	if kinds, rate := qdiscs(t, veth); rate != 10_000_000/8 || !slices.Contains(kinds, "ingress") {
		t.Errorf("host veth %s: qdiscs %v, tbf rate %d B/s; want a tbf at 1250000 B/s and an ingress qdisc", veth, kinds, rate)
	}
	if kinds, rate := qdiscs(t, ifb); rate != 20_000_000/8 {
		t.Errorf("ifb %s: qdiscs %v, tbf rate %d B/s; want a tbf at 2500000 B/s", ifb, kinds, rate)
	}

	e.stopPod(t, id)
	if ifbDevices()[ifb] {
		t.Errorf("ifb %s left after StopPodSandbox", ifb)
	}
	if kinds, _ := qdiscs(t, veth); kinds != nil {
		t.Errorf("host veth %s left after StopPodSandbox, qdiscs %v", veth, kinds)
	}
	e.removePod(t, id)
	e.assertNoLeaks(t)
}

// TestNetworkBandwidthInvalid: a bandwidth annotation that is not a quantity,
// or is out of kubelet's range, is InvalidArgument before anything is made.
// A host-network pod is not shaped, so its annotations are not read.
func TestNetworkBandwidthInvalid(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	for _, tt := range []struct{ key, value string }{
		{ingressBandwidth, "10 Mbit"},
		{egressBandwidth, "fast"},
		{ingressBandwidth, "100"},
		{egressBandwidth, "2P"},
	} {
		cfg := e.podConfig("badbw", withAnnotation(tt.key, tt.value))
		_, err := e.rt.RunPodSandbox(rpcCtx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if code(err) != codes.InvalidArgument {
			t.Errorf("%s=%q: RunPodSandbox: %v, want InvalidArgument", tt.key, tt.value, err)
		}
	}
	if calls := e.cniCalls(); len(calls) != 0 {
		t.Errorf("CNI called for a pod with a bad bandwidth: %v", calls)
	}
	e.assertNoLeaks(t)

	id := e.runPod(t, e.podConfig("hostbw", withHostNetwork(), withAnnotation(egressBandwidth, "fast")), "")
	e.stopAndRemove(t, id)
	e.assertNoLeaks(t)
}

// TestNetworkDNSCapability: the pod's DNS config reaches the plugins that
// declare the "dns" capability; a pod without one passes none.
func TestNetworkDNSCapability(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	servers, searches, options := []string{"10.96.0.10", "10.96.0.11"}, []string{"pbtest.svc.cluster.local", "cluster.local"}, []string{"ndots:5"}
	id := e.runPod(t, e.podConfig("dns", withDNS(servers, searches, options)), "")
	rc := e.runtimeConfigOf(t, id)
	if d := rc.DNS; d == nil || !reflect.DeepEqual(d.Servers, servers) || !reflect.DeepEqual(d.Searches, searches) || !reflect.DeepEqual(d.Options, options) {
		t.Errorf("dns runtimeConfig %+v, want servers %v searches %v options %v", d, servers, searches, options)
	}
	if rc.Bandwidth != nil {
		t.Errorf("bandwidth runtimeConfig %+v for a pod without bandwidth annotations", rc.Bandwidth)
	}

	plain := e.runPod(t, e.podConfig("nodns"), "")
	if rc := e.runtimeConfigOf(t, plain); rc.DNS != nil || rc.Bandwidth != nil {
		t.Errorf("runtimeConfig %+v for a pod without DNS config or bandwidth annotations", rc)
	}
	e.stopAndRemove(t, id, plain)
	e.assertNoLeaks(t)
}
