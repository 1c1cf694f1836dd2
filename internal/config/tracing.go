package config

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
)

// Tracing configures OpenTelemetry tracing: a span for every CRI RPC and,
// under it, one for each phase of the work (netns, CNI, runtime create,
// ...), exported over OTLP/gRPC. Off unless Endpoint is set.
//
// The keys are containerd's (endpoint, insecure, service_name; its
// sampling_ratio is sampling_rate here). The rate is a fraction, as
// containerd's and OTEL_TRACES_SAMPLER_ARG are, rather than CRI-O's
// sampling_rate_per_million.
type Tracing struct {
	// Endpoint is the OTLP/gRPC collector as host:port (the collector's
	// default port is 4317). Empty, the default, turns tracing off: no
	// exporter is made and the RPCs pay nothing for it.
	Endpoint string `toml:"endpoint"`
	// SamplingRate is the fraction of traces that start at podbay which
	// are recorded, 0.0 to 1.0 (default 1.0: every one, as containerd).
	// The sampler is parent-based: an RPC that carries a trace context
	// (the kubelet's, with its KubeletTracing) follows the caller's
	// decision whatever the rate.
	SamplingRate float64 `toml:"sampling_rate"`
	// ServiceName is the service.name of podbay's spans; default podbayd.
	ServiceName string `toml:"service_name"`
	// Insecure sends the spans over plain gRPC; false uses TLS with the
	// system's roots. Unset, it is true for a loopback endpoint (a
	// collector agent on the node, the usual setup) and false otherwise.
	Insecure *bool `toml:"insecure"`
}

// defaultTracing is Tracing's default: off.
func defaultTracing() Tracing {
	return Tracing{SamplingRate: 1, ServiceName: "podbayd"}
}

// Enabled reports whether spans are exported.
func (t Tracing) Enabled() bool { return t.Endpoint != "" }

// validate checks t and fills Insecure when tracing is on.
func (t *Tracing) validate() []error {
	var errs []error
	if math.IsNaN(t.SamplingRate) || t.SamplingRate < 0 || t.SamplingRate > 1 {
		errs = append(errs, fmt.Errorf("tracing.sampling_rate %v: want 0.0 to 1.0", t.SamplingRate))
	}
	if t.ServiceName == "" {
		errs = append(errs, fmt.Errorf("tracing.service_name must not be empty"))
	}
	if t.Endpoint == "" {
		return errs
	}
	host, err := endpointHost(t.Endpoint)
	if err != nil {
		return append(errs, fmt.Errorf("tracing.endpoint %q: %v", t.Endpoint, err))
	}
	if t.Insecure == nil {
		loopback := isLoopback(host)
		t.Insecure = &loopback
	}
	return errs
}

// endpointHost checks that endpoint is host:port and returns the host.
func endpointHost(endpoint string) (string, error) {
	if strings.Contains(endpoint, "://") {
		// containerd's endpoint is a URL; this one is gRPC's target.
		return "", fmt.Errorf("want host:port, without a scheme")
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return "", fmt.Errorf("want host:port: %v", err)
	}
	if host == "" {
		return "", fmt.Errorf("want host:port: the host is missing")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("port %q: want 1 to 65535", port)
	}
	return host, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
