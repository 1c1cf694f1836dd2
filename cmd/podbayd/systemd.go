package main

import (
	"path/filepath"
	"strings"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/systemd"
)

// runcShim reports whether a vm handler's shim takes runc's options:
// runtime_path or runtime_root is set, or the binary is a runc shim
// (containerd-shim-runc-v2). Kata's (config_path) does not.
func runcShim(rc config.Runtime, shimPath string) bool {
	if rc.ConfigPath != "" {
		return false
	}
	return rc.RuntimePath != "" || rc.RuntimeRoot != "" || strings.Contains(filepath.Base(shimPath), "runc")
}

// unitStopper is sd as a runtime.UnitStopper, nil (not a typed nil) when
// there is none.
func unitStopper(sd *systemd.Manager) runtime.UnitStopper {
	if sd == nil {
		return nil
	}
	return sd
}
