package shim

import (
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestParseBootstrap(t *testing.T) {
	const addr = "unix:///run/containerd/s/ae9281fa81bac7eec1403b80c0e19071133ebf4777f3a3001417231642ae0394"
	for _, tc := range []struct {
		name    string
		out     string
		want    string
		wantErr error // nil: any error when want is ""
	}{
		{name: "bare address", out: addr, want: addr},
		{name: "bare address with newline", out: addr + "\n", want: addr},
		{name: "abstract address", out: "/containerd-shim/ns/id/shim.sock", want: "/containerd-shim/ns/id/shim.sock"},
		{name: "json v2", out: `{"version":2,"address":"` + addr + `","protocol":"ttrpc"}`, want: addr},
		{name: "json v2 without protocol", out: `{"version":2,"address":"` + addr + `"}`, want: addr},
		{name: "json v3", out: `{"version":3,"address":"` + addr + `","protocol":"ttrpc"}`, wantErr: errdefs.ErrNotImplemented},
		{name: "json grpc", out: `{"version":2,"address":"` + addr + `","protocol":"grpc"}`, wantErr: errdefs.ErrNotImplemented},
		{name: "json without address", out: `{"version":2,"protocol":"ttrpc"}`},
		{name: "bad json", out: `{"version":`},
		{name: "empty", out: " \n"},
		{name: "chatter", out: "some warning\n" + addr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBootstrap([]byte(tc.out))
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("parseBootstrap = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseBootstrap = %q, want an error", got)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("parseBootstrap error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestSocketPath(t *testing.T) {
	for addr, want := range map[string]string{
		"unix:///run/containerd/s/abc": "/run/containerd/s/abc",
		"unix://":                      "",
		"/abstract":                    "",
		"vsock://3:1024":               "",
	} {
		got, ok := socketPath(addr)
		if got != want || ok != (want != "") {
			t.Errorf("socketPath(%q) = %q, %v; want %q", addr, got, ok, want)
		}
	}
}
