package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/podbay/podbay/internal/errdefs"
)

const wantDefaultConfList = `{
  "cniVersion": "1.0.0",
  "name": "podbay",
  "generatedBy": "podbay",
  "podbayMasquerade": true,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "podbay0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [
          [
            {
              "subnet": "10.88.0.0/16"
            }
          ]
        ],
        "routes": [
          {
            "dst": "0.0.0.0/0"
          }
        ]
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      },
      "snat": true
    },
    {
      "type": "bandwidth",
      "capabilities": {
        "bandwidth": true
      }
    }
  ]
}
`

func defaultTestConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		ConfDir:    filepath.Join(t.TempDir(), "net.d"), // created by New
		PluginDirs: []string{t.TempDir()},
		CacheDir:   t.TempDir(),
		// A bridge no host has: UpdatePodCIDR looks at the bridge.
		DefaultBridge: fmt.Sprintf("pbtnone%d", os.Getpid()%100000),
		WriteDefault:  true,
	}
}

func TestWriteDefault(t *testing.T) {
	cfg := defaultTestConfig(t)
	cfg.DefaultBridge = "" // the golden file's podbay0
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.ConfDir, DefaultConfFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != wantDefaultConfList {
		t.Errorf("default conflist:\n%s\nwant:\n%s", data, wantDefaultConfList)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		t.Fatalf("libcni cannot parse the default conflist: %v", err)
	}
	if list.Name != "podbay" || len(list.Plugins) != 3 || !list.Plugins[1].Network.Capabilities["portMappings"] ||
		!list.Plugins[2].Network.Capabilities["bandwidth"] {
		t.Errorf("parsed: %+v", list)
	}
	if entries, _ := os.ReadDir(cfg.ConfDir); len(entries) != 1 {
		t.Errorf("ConfDir holds %d entries, want only the conflist (no temp files)", len(entries))
	}

	// A restart finds a loadable config (ours) and writes nothing.
	if err := os.Chtimes(path, fi.ModTime().Add(-3600e9), fi.ModTime().Add(-3600e9)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("restart rewrote the default conflist")
	}
}

// TestWriteDefaultWithSystemPlugins checks that Debian's plugins accept the
// default conflist (VERSION needs no root).
// TestWriteDefaultWithSystemPlugins loads the default conflist with the
// real plugins: it must be usable, and loading it installs podbay's
// masquerade for its subnet (root only: it changes the host's nat table,
// for a network name and subnet of its own), which ReleaseMasquerade takes
// away again.
func TestWriteDefaultWithSystemPlugins(t *testing.T) {
	requireIntegration(t)
	cfg := defaultTestConfig(t)
	cfg.PluginDirs = []string{systemPluginDir}
	cfg.DefaultName = "podbaytest-" + randHex(t, 3)
	cfg.DefaultBridge = "pbt" + randHex(t, 3)
	cfg.DefaultSubnet = freeSubnet(t).String()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chain := MasqueradeChain(cfg.DefaultName)
	t.Cleanup(func() {
		if err := RemoveMasquerade(context.Background(), cfg.DefaultName); err != nil {
			t.Error(err)
		}
	})
	if err := m.Status(context.Background()); err != nil {
		t.Fatalf("Status with the default conflist: %v", err)
	}
	rules := natRules(t, chain)
	for _, want := range []string{
		"-A POSTROUTING -s " + cfg.DefaultSubnet + " ",
		"-A " + chain + " -d " + cfg.DefaultSubnet + " ",
		"-A " + chain + " ! -d 224.0.0.0/4 ",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("after loading the default conflist, no rule %q in:\n%s", want, rules)
		}
	}
	// Idempotent: loading again adds nothing.
	m.loaded.Store(nil)
	if err := m.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again := natRules(t, chain); again != rules {
		t.Errorf("a second load changed the rules:\n%s\nwas:\n%s", again, rules)
	}
	if err := m.ReleaseMasquerade(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := natRules(t, chain); left != "" {
		t.Errorf("ReleaseMasquerade left:\n%s", left)
	}

	// A Manager that never loaded the config (a daemon that only tore
	// pods down with their cached configs) still releases what its
	// ConfDir's network asks for.
	if err := m.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.ReleaseMasquerade(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := natRules(t, chain); left != "" {
		t.Errorf("ReleaseMasquerade of a Manager that never loaded the config left:\n%s", left)
	}
}

// natRules returns the nat table's rules that name chain.
func natRules(t *testing.T, chain string) string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A ") && strings.Contains(l, chain) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestWriteDefaultRespectsOperatorConfig(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		wantWrite bool
	}{
		{"empty dir", nil, true},
		{"only garbage", map[string]string{"10-x.conflist": "{", "20-y.conf": "[]"}, true},
		{"only non-config files", map[string]string{"README": "hi", "10-x.conflist.bak": "{}"}, true},
		// The operator's plugins are not installed yet: keep their choice.
		{"operator config, plugins missing", map[string]string{"50-calico.conflist": conflist("k8s-pod-network", "1.0.0", "calico")}, false},
		{"operator single conf", map[string]string{"99-mine.conf": singleConf("mine", "bridge")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultTestConfig(t)
			if err := os.MkdirAll(cfg.ConfDir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFiles(t, cfg.ConfDir, tt.files)
			if _, err := New(cfg); err != nil {
				t.Fatal(err)
			}
			_, err := os.Stat(filepath.Join(cfg.ConfDir, DefaultConfFile))
			if written := err == nil; written != tt.wantWrite {
				t.Errorf("written = %v, want %v", written, tt.wantWrite)
			}
		})
	}
}

func TestDefaultConfListOptions(t *testing.T) {
	cfg := Config{DefaultName: "n", DefaultBridge: "br9", DefaultDataDir: "/x/ipam"}.withDefaults()
	data, err := cfg.defaultConfList("10.1.0.0/16, fd00:1::/64")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name    string `json:"name"`
		Plugins []struct {
			Bridge string `json:"bridge"`
			IPAM   struct {
				Ranges  [][]map[string]string `json:"ranges"`
				Routes  []map[string]string   `json:"routes"`
				DataDir string                `json:"dataDir"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	ipam := got.Plugins[0].IPAM
	if got.Name != "n" || got.Plugins[0].Bridge != "br9" || ipam.DataDir != "/x/ipam" ||
		len(ipam.Ranges) != 2 || ipam.Ranges[0][0]["subnet"] != "10.1.0.0/16" || ipam.Ranges[1][0]["subnet"] != "fd00:1::/64" ||
		len(ipam.Routes) != 2 || ipam.Routes[0]["dst"] != "0.0.0.0/0" || ipam.Routes[1]["dst"] != "::/0" {
		t.Errorf("dual-stack conflist:\n%s", data)
	}

	for _, bad := range []string{"10.1.0.0", "10.1.0.0/16,10.2.0.0/16", "fd00::/64,fd01::/64", "x/8", ""} {
		if _, err := cfg.defaultConfList(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("subnet %q: err = %v, want invalid argument", bad, err)
		}
	}
	if _, err := New(Config{DefaultSubnet: "nope", ConfDir: t.TempDir()}); err == nil {
		t.Error("New accepted an invalid default subnet")
	}
}

func TestUpdatePodCIDR(t *testing.T) {
	ctx := context.Background()
	operatorConf := conflist("mine", "1.0.0", "bridge")

	tests := []struct {
		name      string
		existing  string // content of 10-podbay.conflist; "" = absent
		cidr      string
		wantErr   error
		wantFile  string // substring expected in the file afterwards; "" = absent
		unchanged bool
	}{
		{name: "rewrites ours", existing: "ours", cidr: "10.244.1.0/24", wantFile: `"subnet": "10.244.1.0/24"`},
		{name: "dual stack", existing: "ours", cidr: "10.244.1.0/24,fd00:244:1::/64", wantFile: `"subnet": "fd00:244:1::/64"`},
		{name: "same cidr is a no-op", existing: "ours", cidr: "10.88.0.0/16", unchanged: true, wantFile: `"subnet": "10.88.0.0/16"`},
		{name: "operator file with our name left alone", existing: operatorConf, cidr: "10.244.1.0/24", unchanged: true, wantFile: `"name":"mine"`},
		{name: "absent is a no-op", cidr: "10.244.1.0/24"},
		{name: "empty cidr is a no-op", existing: "ours", cidr: "", unchanged: true, wantFile: `"subnet": "10.88.0.0/16"`},
		{name: "invalid cidr", existing: "ours", cidr: "10.244.1.0", wantErr: errdefs.ErrInvalidArgument, unchanged: true, wantFile: `"subnet": "10.88.0.0/16"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultTestConfig(t)
			cfg.WriteDefault = false
			if err := os.MkdirAll(cfg.ConfDir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(cfg.ConfDir, DefaultConfFile)
			switch tt.existing {
			case "":
			case "ours":
				data, err := cfg.withDefaults().defaultConfList(DefaultNetworkSubnet)
				if err != nil {
					t.Fatal(err)
				}
				writeFiles(t, cfg.ConfDir, map[string]string{DefaultConfFile: string(data)})
			default:
				writeFiles(t, cfg.ConfDir, map[string]string{DefaultConfFile: tt.existing})
			}
			before, _ := os.Stat(path)
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}

			err = m.UpdatePodCIDR(ctx, tt.cidr)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("UpdatePodCIDR = %v, want %v", err, tt.wantErr)
			}
			data, err := os.ReadFile(path)
			if tt.wantFile == "" {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("file exists after no-op: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tt.wantFile) {
				t.Errorf("file lacks %q:\n%s", tt.wantFile, data)
			}
			after, _ := os.Stat(path)
			if same := os.SameFile(before, after) && before.ModTime().Equal(after.ModTime()); same != tt.unchanged {
				t.Errorf("file unchanged = %v, want %v", same, tt.unchanged)
			}
			if !tt.unchanged {
				if !generatedByPodbay(data) || after.Mode().Perm() != 0o644 {
					t.Errorf("rewritten file lost its marker or mode (%v)", after.Mode().Perm())
				}
			}
		})
	}
}

// TestUpdatePodCIDRBridge: with a real bridge holding the old range's
// gateway, a pod CIDR change removes that address (or the bridge plugin
// refuses every new pod: "already has an IP address different from"), and
// while a pod is attached to the bridge the change waits for it to go.
func TestUpdatePodCIDRBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a bridge")
	}
	ctx := context.Background()
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	suffix := os.Getpid() % 100000
	bridge, port := fmt.Sprintf("pbtcidr%d", suffix), fmt.Sprintf("pbtport%d", suffix)
	ip("link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	ip("addr", "add", "10.254.0.1/24", "dev", bridge)

	cfg := defaultTestConfig(t)
	cfg.DefaultBridge = bridge
	cfg.DefaultSubnet = "10.254.0.0/24"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.ConfDir, DefaultConfFile)
	subnetIs := func(want string) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"subnet": "`+want+`"`) {
			t.Errorf("conflist range is not %s:\n%s", want, data)
		}
	}
	bridgeAddrs := func() string {
		t.Helper()
		out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", bridge).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}

	// A pod attached (a veth on the bridge): the change waits.
	ip("link", "add", port, "type", "veth", "peer", "name", port+"p")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", port).Run() })
	ip("link", "set", port, "master", bridge)
	if err := m.UpdatePodCIDR(ctx, "10.253.0.0/24"); err != nil {
		t.Fatal(err)
	}
	subnetIs("10.254.0.0/24")
	if a := bridgeAddrs(); !strings.Contains(a, "10.254.0.1/24") {
		t.Errorf("bridge lost the gateway of its attached pods: %q", a)
	}

	// The pod gone: the deferred change is made, the old gateway goes.
	ip("link", "del", port)
	m.applyPendingCIDR(ctx)
	subnetIs("10.253.0.0/24")
	if a := bridgeAddrs(); a != "" {
		t.Errorf("bridge keeps the old range's address after the change: %q", a)
	}
	// Nothing pending any more: another teardown changes nothing.
	m.applyPendingCIDR(ctx)
	subnetIs("10.253.0.0/24")
}
