package doctor

import (
	"os"
	"path/filepath"
	"testing"
)

const goodConflist = `{"cniVersion": "1.0.0", "name": "mynet", "plugins": [
  {"type": "bridge", "bridge": "br7", "ipMasq": true,
   "ipam": {"type": "host-local", "dataDir": "/srv/ipam", "ranges": [[{"subnet": "10.7.0.0/16"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}`

func cniHost(t *testing.T, files map[string]string, plugins ...string) (*fakeProbe, string) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := newFakeProbe()
	p.dir(dir)
	for _, pl := range plugins {
		p.modes["/opt/cni/bin/"+pl] = 0o755
	}
	return p, dir
}

func TestResolveNetwork(t *testing.T) {
	cfg := validConfig()

	p, dir := cniHost(t, map[string]string{"20-mynet.conflist": goodConflist}, "bridge", "host-local", "portmap")
	cfg.Network.ConfDir = dir
	n, r := ResolveNetwork(p, cfg)
	wantVerdict(t, r, OK, `network "mynet" from `+dir+"/20-mynet.conflist: plugins bridge, host-local, portmap found")
	if n == nil || n.Name != "mynet" || n.Bridge != "br7" || n.IPAMDir != "/srv/ipam/mynet" {
		t.Fatalf("network = %+v", n)
	}

	// A broken file sorts first: podbayd skips it, and so does doctor.
	p, dir = cniHost(t, map[string]string{"10-broken.conf": "{not json", "20-mynet.conflist": goodConflist}, "bridge", "host-local", "portmap")
	cfg.Network.ConfDir = dir
	n, r = ResolveNetwork(p, cfg)
	wantVerdict(t, r, Warn, "skipped before it: 10-broken.conf")
	if n == nil || n.Name != "mynet" {
		t.Fatalf("network = %+v", n)
	}

	// Plugins missing: no default is written over an operator's file.
	p, dir = cniHost(t, map[string]string{"20-mynet.conflist": goodConflist}, "bridge")
	cfg.Network.ConfDir = dir
	n, r = ResolveNetwork(p, cfg)
	wantVerdict(t, r, Fail, "plugins not in /usr/lib/cni, /opt/cni/bin: host-local, portmap")
	if n == nil || n.Name != "mynet" {
		t.Fatalf("network = %+v", n)
	}

	// Empty dir: podbayd's default network, whose plugins must be there.
	p, dir = cniHost(t, nil, "bridge", "portmap", "bandwidth", "host-local")
	cfg.Network.ConfDir = dir
	n, r = ResolveNetwork(p, cfg)
	wantVerdict(t, r, OK, `podbayd would write 10-podbay.conflist (network "podbay", bridge podbay0, 10.88.0.0/16)`)
	if n == nil || n.File != "" || n.Bridge != "podbay0" || n.IPAMDir != "/var/lib/cni/networks/podbay" {
		t.Fatalf("default network = %+v", n)
	}
	delete(p.modes, "/opt/cni/bin/bandwidth")
	delete(p.modes, "/opt/cni/bin/host-local")
	_, r = ResolveNetwork(p, cfg)
	wantVerdict(t, r, Fail, "podbayd's default needs plugins not in /usr/lib/cni, /opt/cni/bin: host-local, bandwidth")

	cfg.Network.WriteDefault = false
	n, r = ResolveNetwork(p, cfg)
	wantVerdict(t, r, Fail, "write_default_config = false")
	if n != nil {
		t.Fatalf("network = %+v", n)
	}
}
