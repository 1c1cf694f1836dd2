package config

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestTracingConfig(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Tracing; tr.Enabled() || tr.SamplingRate != 1 || tr.ServiceName != "podbayd" || tr.Insecure != nil {
		t.Fatalf("tracing defaults: %+v", tr)
	}

	path := filepath.Join(t.TempDir(), "podbay.toml")
	os.WriteFile(path, []byte(`
[tracing]
endpoint = "collector.example:4317"
sampling_rate = 0.25
service_name = "podbayd-node1"
`), 0o644)
	cfg, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := cfg.Tracing
	if !tr.Enabled() || tr.Endpoint != "collector.example:4317" || tr.SamplingRate != 0.25 || tr.ServiceName != "podbayd-node1" {
		t.Fatalf("[tracing] not applied: %+v", tr)
	}
	if tr.Insecure == nil || *tr.Insecure {
		t.Fatalf("a remote endpoint must default to TLS, insecure = %v", tr.Insecure)
	}

	// Unset, insecure follows the endpoint: plain gRPC on loopback only.
	yes, no := true, false
	for _, tc := range []struct {
		endpoint string
		insecure *bool
		want     bool
	}{
		{"127.0.0.1:4317", nil, true},
		{"localhost:4317", nil, true},
		{"[::1]:4317", nil, true},
		{"10.0.0.5:4317", nil, false},
		{"otel-collector.observability:4317", nil, false},
		{"127.0.0.1:4317", &no, false},
		{"10.0.0.5:4317", &yes, true},
	} {
		c := Default()
		c.Tracing.Endpoint, c.Tracing.Insecure = tc.endpoint, tc.insecure
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", tc.endpoint, err)
			continue
		}
		if got := *c.Tracing.Insecure; got != tc.want {
			t.Errorf("%s with insecure %v: got %v, want %v", tc.endpoint, tc.insecure, got, tc.want)
		}
	}

	// A rate of 0 is kept, not taken for "unset".
	os.WriteFile(path, []byte("[tracing]\nendpoint = \"127.0.0.1:4317\"\nsampling_rate = 0.0\n"), 0o644)
	if cfg, err = Load(path, false); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || cfg.Tracing.SamplingRate != 0 {
		t.Fatalf("sampling_rate 0: %v, rate %v", err, cfg.Tracing.SamplingRate)
	}
}

func TestTracingConfigRejects(t *testing.T) {
	for name, mod := range map[string]func(*Tracing){
		"rate above 1":  func(tr *Tracing) { tr.SamplingRate = 1.5 },
		"negative rate": func(tr *Tracing) { tr.SamplingRate = -0.1 },
		"NaN rate":      func(tr *Tracing) { tr.SamplingRate = math.NaN() },
		"no service":    func(tr *Tracing) { tr.ServiceName = "" },
		"url":           func(tr *Tracing) { tr.Endpoint = "http://localhost:4317" },
		"no port":       func(tr *Tracing) { tr.Endpoint = "localhost" },
		"port 0":        func(tr *Tracing) { tr.Endpoint = "localhost:0" },
		"named port":    func(tr *Tracing) { tr.Endpoint = "localhost:otlp" },
		"no host":       func(tr *Tracing) { tr.Endpoint = ":4317" },
	} {
		c := Default()
		mod(&c.Tracing)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
	path := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(path, []byte("[tracing]\nsampling_rate_per_million = 1000000\n"), 0o644)
	if _, err := Load(path, false); err == nil {
		t.Error("an unknown [tracing] key loaded")
	}
}
