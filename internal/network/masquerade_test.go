package network

import (
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func TestMasqueradeChain(t *testing.T) {
	got := MasqueradeChain("podbay")
	if len(got) > 28 || got[:len(MasqueradeChainPrefix)] != MasqueradeChainPrefix {
		t.Fatalf("chain %q: want %s… of at most 28 characters", got, MasqueradeChainPrefix)
	}
	if got == MasqueradeChain("podbay2") {
		t.Errorf("two networks share chain %s", got)
	}
	if got != MasqueradeChain("podbay") {
		t.Errorf("chain name not stable")
	}
}

func TestMasqueradeFor(t *testing.T) {
	cfg := Config{DefaultName: "pods", DefaultBridge: "br9"}.withDefaults()
	dual, err := cfg.defaultConfList("10.9.0.0/16,fd00:9::/64")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(dual)
	if err != nil {
		t.Fatal(err)
	}
	mq := masqueradeFor(list)
	if mq == nil {
		t.Fatal("podbay's default conflist asks for no masquerade")
	}
	var subnets []string
	for _, n := range mq.subnets {
		subnets = append(subnets, n.String())
	}
	if mq.network != "pods" || !reflect.DeepEqual(subnets, []string{"10.9.0.0/16", "fd00:9::/64"}) {
		t.Errorf("masquerade %q %v, want pods [10.9.0.0/16 fd00:9::/64]", mq.network, subnets)
	}
	if usesIPMasq(list) {
		t.Error("podbay's default conflist still has the bridge plugin's ipMasq")
	}

	for name, conf := range map[string]string{
		"operator's ipMasq":       `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}}]}`,
		"key without generatedBy": `{"cniVersion":"1.0.0","name":"n","podbayMasquerade":true,"plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}}]}`,
		"key false":               `{"cniVersion":"1.0.0","name":"n","generatedBy":"podbay","podbayMasquerade":false,"plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}}]}`,
		"older podbay conflist":   `{"cniVersion":"1.0.0","name":"n","generatedBy":"podbay","plugins":[{"type":"bridge","ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}}]}`,
		"no subnet":               `{"cniVersion":"1.0.0","name":"n","generatedBy":"podbay","podbayMasquerade":true,"plugins":[{"type":"ptp"}]}`,
	} {
		list, err := libcni.ConfListFromBytes([]byte(conf))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if mq := masqueradeFor(list); mq != nil {
			t.Errorf("%s: podbay would masquerade %v", name, mq.subnets)
		}
	}
}

func TestJumpsTo(t *testing.T) {
	chain := MasqueradeChain("pods")
	out := "-P POSTROUTING ACCEPT\n" +
		`-A POSTROUTING -s 10.9.0.0/16 -m comment --comment "podbay masquerade name: \"pods\"" -j ` + chain + "\n" +
		`-A POSTROUTING -s 10.8.0.0/16 -m comment --comment "podbay masquerade name: \"pods\"" -j ` + chain + "\n" +
		`-A POSTROUTING -s 10.7.0.5/32 -m comment --comment "name: \"other\" id: \"x\"" -j CNI-abc` + "\n" +
		`-A POSTROUTING -j ` + chain + "-not\n"
	got := jumpsTo([]byte(out), chain)
	want := [][]string{
		{"POSTROUTING", "-s", "10.9.0.0/16", "-m", "comment", "--comment", `podbay masquerade name: "pods"`, "-j", chain},
		{"POSTROUTING", "-s", "10.8.0.0/16", "-m", "comment", "--comment", `podbay masquerade name: "pods"`, "-j", chain},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("jumpsTo:\n got %q\nwant %q", got, want)
	}
	if _, err := splitRule(`-A X --comment "open`); err == nil {
		t.Error("splitRule accepted an unterminated quote")
	}
}
