package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/podbay/podbay/internal/errdefs"
)

// maxShimVersion is the task API version podbay speaks: containerd.task.v2.
// It is passed to the shim as MAX_SHIM_VERSION, which tells shims from
// containerd 2 not to offer the v3 API.
const maxShimVersion = 2

// bootstrapParams is what the start command of a shim from containerd
// 1.7 or later may print instead of a bare address.
type bootstrapParams struct {
	Version  int    `json:"version"`
	Address  string `json:"address"`
	Protocol string `json:"protocol"`
}

// parseBootstrap returns the ttrpc address in the output of a shim's
// start command: a bare address ("unix:///run/containerd/s/<hash>"), or
// JSON bootstrap parameters (`{"version":2,"address":…,"protocol":"ttrpc"}`).
// Versions other than 2 and protocols other than ttrpc are refused.
func parseBootstrap(out []byte) (string, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return "", errors.New("shim printed no address")
	}
	if out[0] != '{' {
		addr := string(out)
		if strings.ContainsAny(addr, " \t\n") {
			return "", fmt.Errorf("shim printed %q, not an address", truncate(addr, 200))
		}
		return addr, nil
	}
	var p bootstrapParams
	if err := json.Unmarshal(out, &p); err != nil {
		return "", fmt.Errorf("parse shim bootstrap parameters %q: %w", truncate(string(out), 200), err)
	}
	switch {
	case p.Version != maxShimVersion:
		return "", fmt.Errorf("shim speaks task API version %d; podbay speaks version %d: %w", p.Version, maxShimVersion, errdefs.ErrNotImplemented)
	case p.Protocol != "" && p.Protocol != "ttrpc":
		return "", fmt.Errorf("shim speaks %q; podbay speaks ttrpc: %w", p.Protocol, errdefs.ErrNotImplemented)
	case p.Address == "":
		return "", errors.New("shim bootstrap parameters have no address")
	}
	return p.Address, nil
}

// dialShim connects to a shim's ttrpc address: "unix://<path>" is a socket
// file; an address without a scheme is an abstract socket (shims before
// containerd 1.5).
func dialShim(ctx context.Context, address string) (net.Conn, error) {
	var d net.Dialer
	if path, ok := socketPath(address); ok {
		return d.DialContext(ctx, "unix", path)
	}
	if strings.Contains(address, "://") {
		return nil, fmt.Errorf("shim address %q: unsupported scheme: %w", address, errdefs.ErrNotImplemented)
	}
	return d.DialContext(ctx, "unix", "\x00"+address)
}

// socketPath returns the file of a "unix://" address.
func socketPath(address string) (string, bool) {
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok || path == "" {
		return "", false
	}
	return path, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
