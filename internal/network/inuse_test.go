package network

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestConfigInUse(t *testing.T) {
	m, _ := newUnitManager(t, map[string]string{
		"05-broken.conflist": `{"cniVersion":"1.0.0","name":"broken","plugins":[{"type":"missing"}]}`,
		"10-net.conflist":    conflist("net", "1.0.0", "rec"),
	})
	got := m.ConfigInUse(context.Background())
	if got.LoadStatus != "OK" || got.File != "10-net.conflist" || got.Network != "net" || got.CNIVersion != "1.0.0" {
		t.Errorf("in use: %+v", got)
	}
	var conf map[string]any
	if err := json.Unmarshal(got.Config, &conf); err != nil || conf["name"] != "net" {
		t.Errorf("config %s: %v", got.Config, err)
	}
	if len(got.Skipped) != 1 || got.Skipped[0].File != "05-broken.conflist" {
		t.Errorf("skipped %+v", got.Skipped)
	}

	empty, _ := newUnitManager(t, nil)
	got = empty.ConfigInUse(context.Background())
	if got.File != "" || !strings.Contains(got.LoadStatus, "no usable cni network config") {
		t.Errorf("empty conf dir: %+v", got)
	}
}
