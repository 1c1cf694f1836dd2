package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/podbay/podbay/internal/errdefs"
)

const testID = "4f09fe5bbf296ad3962bef6cc12df2be64050e0ef8a3d3dcb58b0b535f933cab"

func testAttachment() Attachment {
	return Attachment{
		ID:           testID,
		NetNS:        "/var/run/netns/podbay-test", // the fake plugins never enter it
		PodName:      "web-0",
		PodNamespace: "prod",
		PodUID:       "7d1c3c2e-4f6a-4a8e-9d55-2f2f0b1d6c11",
		PortMappings: []PortMapping{
			{HostPort: 8080, ContainerPort: 80, Protocol: "TCP"},
			{HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"},
			{ContainerPort: 9090}, // declared, not mapped
		},
		Bandwidth: &Bandwidth{IngressRate: 1e6, IngressBurst: 1e5},
		DNS:       &DNS{Servers: []string{"10.96.0.10"}, Searches: []string{"prod.svc.cluster.local"}},
	}
}

func TestCNIArgs(t *testing.T) {
	got, err := cniArgs(testAttachment())
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", "prod"},
		{"K8S_POD_NAME", "web-0"},
		{"K8S_POD_INFRA_CONTAINER_ID", testID},
		{"K8S_POD_UID", "7d1c3c2e-4f6a-4a8e-9d55-2f2f0b1d6c11"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cniArgs = %v, want %v", got, want)
	}
}

func TestCapabilityArgs(t *testing.T) {
	tests := []struct {
		name    string
		att     Attachment
		want    string // JSON of the capability map
		wantErr bool
	}{
		{
			name: "all",
			att:  testAttachment(),
			want: `{"bandwidth":{"ingressRate":1000000,"ingressBurst":100000},` +
				`"dns":{"servers":["10.96.0.10"],"searches":["prod.svc.cluster.local"]},` +
				`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},` +
				`{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"127.0.0.1"}]}`,
		},
		{name: "none", att: Attachment{ID: "a"}, want: `null`},
		{name: "only unmapped ports", att: Attachment{PortMappings: []PortMapping{{ContainerPort: 80}}}, want: `null`},
		{name: "sctp", att: Attachment{PortMappings: []PortMapping{{HostPort: 1, ContainerPort: 2, Protocol: "SCTP"}}},
			want: `{"portMappings":[{"hostPort":1,"containerPort":2,"protocol":"sctp"}]}`},
		{name: "bad protocol", att: Attachment{PortMappings: []PortMapping{{HostPort: 1, ContainerPort: 2, Protocol: "icmp"}}}, wantErr: true},
		{name: "bad container port", att: Attachment{PortMappings: []PortMapping{{HostPort: 1, ContainerPort: 0}}}, wantErr: true},
		{name: "bad host port", att: Attachment{PortMappings: []PortMapping{{HostPort: 70000, ContainerPort: 1}}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps, err := capabilityArgs(tt.att)
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(caps)
			if string(data) != tt.want {
				t.Errorf("capabilities\n got %s\nwant %s", data, tt.want)
			}
		})
	}
}

// findCall returns the recorded call of plugin with command and interface.
func findCall(t *testing.T, calls []invocation, plugin, command, ifName string) invocation {
	t.Helper()
	for _, c := range calls {
		if c.plugin == plugin && c.command == command && c.ifName == ifName {
			return c
		}
	}
	t.Fatalf("no %s %s %s call among %d", plugin, command, ifName, len(calls))
	return invocation{}
}

func TestSetupPassesArgsAndCapabilities(t *testing.T) {
	// rec declares portMappings and bandwidth, rec2 nothing: libcni passes
	// each capability only to the plugins that declare it.
	conf := `{"cniVersion":"1.0.0","name":"net1","plugins":[
		{"type":"rec","capabilities":{"portMappings":true,"bandwidth":true}},
		{"type":"rec2"}]}`
	m, logDir := newUnitManager(t, map[string]string{"10-net1.conflist": conf})
	att := testAttachment()
	s, err := m.Setup(context.Background(), att)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if s.IPAddress != "10.1.2.3" || s.Networks["net1"] == nil || len(s.CNIPorts) != 2 ||
		!reflect.DeepEqual(s.Ports["80/tcp"], []PortBinding{{HostPort: "8080"}}) {
		t.Errorf("settings: %+v", s)
	}

	calls := invocations(t, logDir)
	if len(calls) != 2 {
		t.Fatalf("%d plugin calls, want rec, rec2 (and no loopback plugin)", len(calls))
	}
	wantArgs := "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=" + testID +
		";K8S_POD_UID=7d1c3c2e-4f6a-4a8e-9d55-2f2f0b1d6c11"
	for _, c := range calls {
		if c.env["CNI_ARGS"] != wantArgs || c.env["CNI_CONTAINERID"] != testID || c.env["CNI_NETNS"] != att.NetNS {
			t.Errorf("%s env: %v", c.plugin, c.env)
		}
	}

	var rec struct {
		Name          string `json:"name"`
		RuntimeConfig struct {
			PortMappings []CNIPortMapping `json:"portMappings"`
			Bandwidth    *cniBandwidth    `json:"bandwidth"`
			DNS          *cniDNS          `json:"dns"`
		} `json:"runtimeConfig"`
	}
	if err := json.Unmarshal([]byte(findCall(t, calls, "rec", "ADD", "eth0").stdin), &rec); err != nil {
		t.Fatal(err)
	}
	wantPM := []CNIPortMapping{
		{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		{HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"},
	}
	if rec.Name != "net1" || !reflect.DeepEqual(rec.RuntimeConfig.PortMappings, wantPM) ||
		rec.RuntimeConfig.Bandwidth == nil || rec.RuntimeConfig.Bandwidth.IngressRate != 1e6 || rec.RuntimeConfig.DNS != nil {
		t.Errorf("rec stdin: %+v", rec)
	}
	rec2 := findCall(t, calls, "rec2", "ADD", "eth0")
	if strings.Contains(rec2.stdin, "runtimeConfig") || !strings.Contains(rec2.stdin, "prevResult") {
		t.Errorf("rec2 stdin: %s", rec2.stdin)
	}
}

func TestSetupFailureRollsBack(t *testing.T) {
	m, logDir := newUnitManager(t, map[string]string{"10-net1.conflist": conflist("net1", "1.0.0", "rec", "rec2")})
	m.loopbackUp = func(string) error { return errors.New("no lo here") }
	_, err := m.Setup(context.Background(), testAttachment())
	if err == nil {
		t.Fatal("Setup succeeded")
	}
	// "lo" fails first: no plugin runs, and the error says why.
	for _, want := range []string{"no lo here", testID} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if calls := invocations(t, logDir); len(calls) != 0 {
		t.Errorf("plugins ran after lo failed: %+v", calls)
	}

	// Now only the main network fails, after rec's ADD would have run.
	m2, logDir2 := newUnitManager(t, map[string]string{"10-net1.conflist": conflist("net1", "1.0.0", "rec", "failer")})
	writeScript(t, filepath.Join(m2.cfg.PluginDirs[0], "failer"), failingPlugin)
	_, err = m2.Setup(context.Background(), testAttachment())
	if err == nil {
		t.Fatal("Setup succeeded")
	}
	for _, want := range []string{"injected plugin failure", `"net1"`, "10-net1.conflist", `type="failer"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	calls := invocations(t, logDir2)
	findCall(t, calls, "rec", "DEL", "eth0")
	if c, err := m2.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached after failed Setup = %+v, %v", c, err)
	}
}

func TestSetupRejects(t *testing.T) {
	m, _ := newUnitManager(t, map[string]string{"10-net1.conflist": conflist("net1", "1.0.0", "rec")})
	empty, _ := newUnitManager(t, nil)
	tests := []struct {
		name string
		m    *Manager
		edit func(*Attachment)
		want error
	}{
		{"no netns", m, func(a *Attachment) { a.NetNS = "" }, errdefs.ErrInvalidArgument},
		{"bad id", m, func(a *Attachment) { a.ID = "../x" }, errdefs.ErrInvalidArgument},
		{"name breaks CNI_ARGS", m, func(a *Attachment) { a.PodName = "a;K8S_POD_UID=x" }, errdefs.ErrInvalidArgument},
		{"bad protocol", m, func(a *Attachment) { a.PortMappings[0].Protocol = "icmp" }, errdefs.ErrInvalidArgument},
		{"no config", empty, func(*Attachment) {}, errdefs.ErrFailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			att := testAttachment()
			tt.edit(&att)
			if _, err := tt.m.Setup(context.Background(), att); !errors.Is(err, tt.want) {
				t.Errorf("Setup = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestTeardownUsesCachedConfig(t *testing.T) {
	ctx := context.Background()
	m, logDir := newUnitManager(t, map[string]string{"10-a.conflist": `{"cniVersion":"1.0.0","name":"neta",
		"plugins":[{"type":"rec","capabilities":{"portMappings":true}}]}`})
	att := testAttachment()
	if _, err := m.Setup(ctx, att); err != nil {
		t.Fatal(err)
	}
	// The operator swaps the network; a Teardown without the pod's arguments
	// (as after a restart) must still DEL network "neta" with the ADD's args.
	if err := os.Remove(filepath.Join(m.cfg.ConfDir, "10-a.conflist")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, m.cfg.ConfDir, map[string]string{"10-b.conflist": conflist("netb", "1.0.0", "rec2")})
	if err := m.Teardown(ctx, Attachment{ID: att.ID}); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	calls := invocations(t, logDir)
	del := findCall(t, calls, "rec", "DEL", "eth0")
	if !strings.Contains(del.stdin, `"name":"neta"`) || !strings.Contains(del.stdin, `"portMappings"`) ||
		!strings.Contains(del.stdin, `"prevResult"`) || !strings.Contains(del.env["CNI_ARGS"], "K8S_POD_NAME=web-0") {
		t.Errorf("DEL with cached config: stdin %s env %v", del.stdin, del.env)
	}
	if del.env["CNI_NETNS"] != "" {
		t.Errorf("DEL got netns %q for a path that is not a namespace", del.env["CNI_NETNS"])
	}
	for _, c := range calls {
		if c.plugin == "rec2" || c.plugin == "loopback" {
			t.Errorf("%s ran: %+v", c.plugin, c)
		}
	}
	if c, err := m.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached after Teardown = %+v, %v", c, err)
	}

	// Nothing cached any more: a repeat DELs with the current config.
	if err := m.Teardown(ctx, Attachment{ID: att.ID}); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	findCall(t, invocations(t, logDir), "rec2", "DEL", "eth0")
}

func TestTeardownWithoutAnyConfig(t *testing.T) {
	m, logDir := newUnitManager(t, nil)
	if err := m.Teardown(context.Background(), Attachment{ID: testID}); err != nil {
		t.Fatalf("Teardown = %v, want nil when there is nothing to DEL with", err)
	}
	if calls := invocations(t, logDir); len(calls) != 0 {
		t.Errorf("plugins ran with nothing to DEL: %+v", calls)
	}
	if err := m.Teardown(context.Background(), Attachment{ID: "../bad"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Teardown with a bad ID = %v", err)
	}
}

func TestCachedAndTeardownCached(t *testing.T) {
	ctx := context.Background()
	m, logDir := newUnitManager(t, map[string]string{"10-a.conflist": conflist("neta", "1.0.0", "rec")})
	ids := []string{"bbbb", "aaaa"}
	for _, id := range ids {
		att := testAttachment()
		att.ID = id
		att.NetNS = "/ns/" + id
		if _, err := m.Setup(ctx, att); err != nil {
			t.Fatal(err)
		}
	}

	// A restarted daemon: new Manager, same cache.
	m2, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := m2.Cached()
	if err != nil {
		t.Fatal(err)
	}
	want := []CachedAttachment{
		{ID: "aaaa", NetNS: "/ns/aaaa", Networks: []string{"neta"}},
		{ID: "bbbb", NetNS: "/ns/bbbb", Networks: []string{"neta"}},
	}
	if !reflect.DeepEqual(cached, want) {
		t.Fatalf("Cached =\n%+v\nwant\n%+v", cached, want)
	}
	if err := m2.TeardownCached(ctx, cached[0]); err != nil {
		t.Fatalf("TeardownCached: %v", err)
	}
	var dels []invocation
	for _, c := range invocations(t, logDir) {
		if c.command == "DEL" {
			dels = append(dels, c)
		}
	}
	if len(dels) != 1 || dels[0].containerID != "aaaa" {
		t.Errorf("DELs: %+v", dels)
	}
	if left, _ := m2.Cached(); len(left) != 1 || left[0].ID != "bbbb" {
		t.Errorf("Cached after TeardownCached = %+v", left)
	}
	if err := m2.TeardownCached(ctx, cached[0]); err != nil {
		t.Errorf("repeat TeardownCached: %v", err)
	}
}

func TestUsableNetNS(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ns")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"":                  "",
		"/nonexistent/ns":   "",
		file:                "", // an unmounted pin file
		"/proc/self/ns/net": "/proc/self/ns/net",
	} {
		if got := usableNetNS(path); got != want {
			t.Errorf("usableNetNS(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestIPMasqChainName(t *testing.T) {
	// Observed from Debian's bridge plugin 1.1.1 for this network and ID.
	if got := ipMasqChainName("podbaytest-bb3bb4", testID); got != "CNI-30d344452e7064f49a83a5b4" {
		t.Errorf("chain = %s", got)
	}
}

// TestConcurrentSetupTeardown runs 20 pods at once through the fake plugins,
// the first call racing the initial config load; -race checks the Manager's
// own state.
func TestConcurrentSetupTeardown(t *testing.T) {
	ctx := context.Background()
	m, logDir := newUnitManager(t, map[string]string{"10-a.conflist": conflist("neta", "1.0.0", "rec")})
	const n = 20
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			att := testAttachment()
			att.ID = fmt.Sprintf("pod%02d", i)
			if _, err := m.Setup(ctx, att); err != nil {
				errs <- err
				return
			}
			errs <- m.Teardown(ctx, att)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if c, err := m.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached = %+v, %v", c, err)
	}
	if calls := invocations(t, logDir); len(calls) != 2*n {
		t.Errorf("%d plugin calls, want %d", len(calls), 2*n)
	}
}

// A pod of an earlier podbay, which added "lo" through the loopback plugin:
// Teardown DELs it from libcni's cache. A daemon killed while libcni wrote
// that entry left it torn; Teardown must still release the pod (it used to
// fail on every retry, so the pod could never be removed) and drop the
// entry.
func TestTeardownWithTornLoopbackCache(t *testing.T) {
	ctx := context.Background()
	m, logDir := newUnitManager(t, map[string]string{"10-a.conflist": conflist("neta", "1.0.0", "rec")})
	att := testAttachment()
	if _, err := m.Setup(ctx, att); err != nil {
		t.Fatal(err)
	}
	// What the earlier podbay's Setup did for "lo".
	if _, err := m.cni.AddNetworkList(ctx, loopbackList, &libcni.RuntimeConf{ContainerID: att.ID, NetNS: att.NetNS, IfName: loopbackIfName}); err != nil {
		t.Fatal(err)
	}
	lo := filepath.Join(m.cfg.CacheDir, "results", loopbackNetwork+"-"+att.ID+"-"+loopbackIfName)
	data, err := os.ReadFile(lo)
	if err != nil {
		t.Fatalf("no lo cache entry to tear: %v", err)
	}
	if err := os.WriteFile(lo, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Teardown(ctx, Attachment{ID: att.ID}); err != nil {
		t.Fatalf("Teardown with a torn lo cache entry: %v", err)
	}
	findCall(t, invocations(t, logDir), "loopback", "DEL", "lo")
	if _, err := os.Stat(lo); !os.IsNotExist(err) {
		t.Errorf("torn cache entry still there: %v", err)
	}
	if c, err := m.Cached(); err != nil || len(c) != 0 {
		t.Errorf("Cached after Teardown = %+v, %v", c, err)
	}
}
