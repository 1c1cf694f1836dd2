package network

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types/create"
)

const bridgeIfaces = `"interfaces":[
	{"name":"cni0","mac":"aa:aa:aa:aa:aa:aa"},
	{"name":"veth1234","mac":"bb:bb:bb:bb:bb:bb"},
	{"name":"eth0","mac":"0a:58:0a:58:00:05","sandbox":"/var/run/netns/podbay-x"}]`

func TestSettingsFromResult(t *testing.T) {
	meta := resultMeta{Network: "podbay", ContainerID: "abc", IfName: "eth0", Bridge: "cni0"}
	tests := []struct {
		name   string
		result string
		meta   *resultMeta // default meta when nil
		want   Settings    // Networks checked separately
		podIPs []string
	}{
		{
			name: "v4 only",
			result: `{"cniVersion":"1.0.0",` + bridgeIfaces + `,
				"ips":[{"address":"10.88.0.5/16","gateway":"10.88.0.1","interface":2}],
				"routes":[{"dst":"0.0.0.0/0"}]}`,
			want: Settings{
				Bridge: "cni0", EndpointID: "veth1234", MacAddress: "0a:58:0a:58:00:05",
				IPAddress: "10.88.0.5", IPPrefixLen: 16, Gateway: "10.88.0.1",
			},
			podIPs: []string{"10.88.0.5"},
		},
		{
			name: "v6 only",
			result: `{"cniVersion":"1.0.0",` + bridgeIfaces + `,
				"ips":[{"address":"fd00:88::5/64","gateway":"fd00:88::1","interface":2}]}`,
			want: Settings{
				Bridge: "cni0", EndpointID: "veth1234", MacAddress: "0a:58:0a:58:00:05",
				GlobalIPv6Address: "fd00:88::5", GlobalIPv6PrefixLen: 64, IPv6Gateway: "fd00:88::1",
			},
			podIPs: []string{"fd00:88::5"},
		},
		{
			name: "dual stack, v6 listed first",
			result: `{"cniVersion":"1.0.0",` + bridgeIfaces + `,
				"ips":[
					{"address":"fd00:88::5/64","gateway":"fd00:88::1","interface":2},
					{"address":"10.88.0.5/16","gateway":"10.88.0.1","interface":2},
					{"address":"10.88.0.6/16","interface":2}]}`,
			want: Settings{
				Bridge: "cni0", EndpointID: "veth1234", MacAddress: "0a:58:0a:58:00:05",
				IPAddress: "10.88.0.5", IPPrefixLen: 16, Gateway: "10.88.0.1",
				GlobalIPv6Address: "fd00:88::5", GlobalIPv6PrefixLen: 64, IPv6Gateway: "fd00:88::1",
			},
			podIPs: []string{"10.88.0.5", "10.88.0.6", "fd00:88::5"},
		},
		{
			name: "cni 0.4.0 result converted",
			result: `{"cniVersion":"0.4.0",` + bridgeIfaces + `,
				"ips":[{"version":"4","address":"10.22.0.7/24","gateway":"10.22.0.1","interface":2}],
				"dns":{}}`,
			want: Settings{
				Bridge: "cni0", EndpointID: "veth1234", MacAddress: "0a:58:0a:58:00:05",
				IPAddress: "10.22.0.7", IPPrefixLen: 24, Gateway: "10.22.0.1",
			},
			podIPs: []string{"10.22.0.7"},
		},
		{
			name:   "cni 0.2.0 result without interfaces",
			result: `{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.9/24","gateway":"10.1.0.1"}}`,
			want: Settings{
				IPAddress: "10.1.0.9", IPPrefixLen: 24, Gateway: "10.1.0.1",
			},
			podIPs: []string{"10.1.0.9"},
		},
		{
			name: "gateway from the default route; other interfaces' addresses ignored",
			result: `{"cniVersion":"1.0.0","interfaces":[
					{"name":"veth9","mac":"bb:bb:bb:bb:bb:bb"},
					{"name":"net1","mac":"cc:cc:cc:cc:cc:cc","sandbox":"/ns"},
					{"name":"eth0","mac":"dd:dd:dd:dd:dd:dd","sandbox":"/ns"}],
				"ips":[
					{"address":"192.168.9.9/24","interface":1},
					{"address":"10.5.0.2/32","interface":2},
					{"address":"fe80::1234/64","interface":2}],
				"routes":[{"dst":"10.0.0.0/8","gw":"169.254.1.2"},{"dst":"0.0.0.0/0","gw":"169.254.1.1"}]}`,
			want: Settings{
				EndpointID: "veth9", MacAddress: "dd:dd:dd:dd:dd:dd",
				IPAddress: "10.5.0.2", IPPrefixLen: 32, Gateway: "169.254.1.1",
				LinkLocalIPv6Address: "fe80::1234", LinkLocalIPv6PrefixLen: 64,
			},
			podIPs: []string{"10.5.0.2"},
		},
		{
			name:   "not a bridge network",
			result: `{"cniVersion":"1.0.0",` + bridgeIfaces + `,"ips":[{"address":"10.88.0.5/16","interface":2}]}`,
			meta:   &resultMeta{Network: "ptpnet", ContainerID: "abc", IfName: "eth0"},
			want: Settings{
				EndpointID: "cni0", MacAddress: "0a:58:0a:58:00:05",
				IPAddress: "10.88.0.5", IPPrefixLen: 16,
			},
			podIPs: []string{"10.88.0.5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := create.CreateFromBytes([]byte(tt.result))
			if err != nil {
				t.Fatalf("parse result: %v", err)
			}
			m := meta
			if tt.meta != nil {
				m = *tt.meta
			}
			got, err := settingsFromResult(res, m)
			if err != nil {
				t.Fatal(err)
			}
			ep := got.Networks[m.Network]
			if len(got.Networks) != 1 || ep == nil {
				t.Fatalf("Networks = %+v", got.Networks)
			}
			if ep.IPAddress != got.IPAddress || ep.GlobalIPv6Address != got.GlobalIPv6Address ||
				ep.MacAddress != got.MacAddress || ep.EndpointID != got.EndpointID || len(ep.CNIResult) == 0 {
				t.Errorf("network entry %+v disagrees with the settings", ep)
			}
			got.Networks = nil
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("settings\n got %+v\nwant %+v", *got, tt.want)
			}
			got.Networks = map[string]*EndpointSettings{m.Network: ep}
			if ips := got.PodIPs(); !slices.Equal(ips, tt.podIPs) {
				t.Errorf("PodIPs = %v, want %v", ips, tt.podIPs)
			}
		})
	}
}

func TestSettingsJSONFieldNames(t *testing.T) {
	// The network settings schema (docs/design.md, "Network settings").
	want := []string{
		"Activation", "Bridge", "CNIPorts", "EndpointID", "Gateway", "GlobalIPv6Address",
		"GlobalIPv6PrefixLen", "IPAddress", "IPPrefixLen", "IPv6Gateway", "LinkLocalIPv6Address",
		"LinkLocalIPv6PrefixLen", "MacAddress", "Networks", "Ports", "SandboxID", "SandboxKey",
	}
	s := &Settings{Networks: map[string]*EndpointSettings{"n": {}}}
	s.setPorts([]CNIPortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}})
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("JSON keys\n got %v\nwant %v", got, want)
	}
	if string(m["Ports"]) != `{"80/tcp":[{"HostIp":"","HostPort":"8080"}]}` {
		t.Errorf("Ports = %s", m["Ports"])
	}
	if string(m["CNIPorts"]) != `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]` {
		t.Errorf("CNIPorts = %s", m["CNIPorts"])
	}

	var back Settings
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(&back, s) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}
