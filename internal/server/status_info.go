package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/podbay/podbay/internal/live"
)

// statusInfo is Status's verbose info, what `crictl info` prints: each
// value is JSON, as containerd's are. "config" is the configuration in
// effect under the configuration file's key names (what `podbayd config`
// prints), "runtimeHandlerConfig" the usable handlers' configuration by
// name and "unavailableRuntimes" the others with the reason, "cniconfig"
// and "lastCNILoadStatus" the CNI network config in use (containerd's
// keys), "lastReload" what the last reload did (null before the first),
// "cgroupVersion" ("v1" or "v2") and "cgroupDriver" ("cgroupfs" or
// "systemd") the host's cgroups as podbay drives them.
//
// No key is "status", "runtimeHandlers" or "features": crictl info puts
// the info keys over its own top-level ones, and its runtimeHandlers is
// the StatusResponse's list with each handler's features. crictl shows a
// value that is not a JSON object as a string, so the handlers are an
// object, not a list.
func (s *Server) statusInfo(ctx context.Context, cur *live.Config, last *ReloadResult) (map[string]string, error) {
	cfg, err := cur.Config().Map()
	if err != nil {
		return nil, fmt.Errorf("encode configuration: %w", err)
	}
	type handler struct {
		Type    string `json:"type"`
		Path    string `json:"path"`
		Root    string `json:"root"`
		Default bool   `json:"default,omitempty"`
	}
	handlers := map[string]handler{}
	for _, name := range cur.Config().RuntimeNames() {
		if _, ok := cur.Runtimes()[name]; ok {
			rc := cur.Config().Runtimes[name]
			handlers[name] = handler{Type: rc.Type, Path: rc.Path, Root: rc.Root, Default: name == cur.Config().DefaultRuntime}
		}
	}
	cgroupVersion, cgroupDriver := "v1", "cgroupfs"
	if s.host.CgroupV2 {
		cgroupVersion = "v2"
	}
	if cur.Config().SystemdCgroup() {
		cgroupDriver = "systemd"
	}
	unavailable := map[string]string{}
	for name, err := range cur.Unavailable() {
		unavailable[name] = err.Error()
	}
	values := map[string]any{
		"config":               cfg,
		"runtimeHandlerConfig": handlers,
		"unavailableRuntimes":  unavailable,
		"lastReload":           last,
		"cgroupVersion":        cgroupVersion,
		"cgroupDriver":         cgroupDriver,
	}
	inUse := s.network.ConfigInUse(ctx)
	values["cniconfig"] = inUse
	values["lastCNILoadStatus"] = inUse.LoadStatus
	info := make(map[string]string, len(values))
	for k, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", k, err)
		}
		info[k] = string(b)
	}
	return info, nil
}
