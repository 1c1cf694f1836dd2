package network

import (
	"context"
	"slices"
	"testing"
)

// TestDefaultNetworkSkipsUnusedPlugins: podbay's own network runs portmap
// and bandwidth only for pods with hostPorts or bandwidth limits, on ADD
// and on the DEL from libcni's cache alike; an operator's network runs its
// every plugin.
func TestDefaultNetworkSkipsUnusedPlugins(t *testing.T) {
	const plugins = `"plugins":[
		{"type":"rec"},
		{"type":"portmap","capabilities":{"portMappings":true}},
		{"type":"bandwidth","capabilities":{"bandwidth":true}}]}`
	podbays := `{"cniVersion":"1.0.0","name":"net1","generatedBy":"podbay",` + plugins
	operators := `{"cniVersion":"1.0.0","name":"net1",` + plugins
	ports := []PortMapping{{HostPort: 8080, ContainerPort: 80}}
	bw := &Bandwidth{EgressRate: 1e6, EgressBurst: 1e5}
	tests := []struct {
		name  string
		conf  string
		ports []PortMapping
		bw    *Bandwidth
		want  []string // the plugins ADD and DEL run, lo aside
	}{
		{"podbay's, neither", podbays, []PortMapping{{ContainerPort: 80}}, nil, []string{"rec"}},
		{"podbay's, hostPorts", podbays, ports, nil, []string{"portmap", "rec"}},
		{"podbay's, bandwidth", podbays, nil, bw, []string{"bandwidth", "rec"}},
		{"podbay's, both", podbays, ports, bw, []string{"bandwidth", "portmap", "rec"}},
		{"operator's, neither", operators, nil, nil, []string{"bandwidth", "portmap", "rec"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pluginDir, logDir := fakePlugins(t, "loopback", "rec", "portmap", "bandwidth")
			cfg := Config{ConfDir: t.TempDir(), PluginDirs: []string{pluginDir}, CacheDir: t.TempDir()}
			writeFiles(t, cfg.ConfDir, map[string]string{"10-net1.conflist": tt.conf})
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m.loopbackUp = func(string) error { return nil }
			att := testAttachment()
			att.PortMappings, att.Bandwidth = tt.ports, tt.bw
			ctx := context.Background()
			if _, err := m.Setup(ctx, att); err != nil {
				t.Fatalf("Setup: %v", err)
			}
			// A config change after the ADD: the DEL still runs what the
			// ADD ran (libcni's cached list).
			writeFiles(t, cfg.ConfDir, map[string]string{"10-net1.conflist": operators})
			if err := m.Teardown(ctx, att); err != nil {
				t.Fatalf("Teardown: %v", err)
			}
			ran := map[string][]string{}
			for _, c := range invocations(t, logDir) {
				if c.plugin != "loopback" {
					ran[c.command] = append(ran[c.command], c.plugin)
				}
			}
			for _, cmd := range []string{"ADD", "DEL"} {
				slices.Sort(ran[cmd])
				if !slices.Equal(ran[cmd], tt.want) {
					t.Errorf("%s ran %v, want %v", cmd, ran[cmd], tt.want)
				}
			}
		})
	}
}
