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
// prints), "runtimeHandlers" the usable handlers and "unavailableRuntimes"
// the others with the reason, "cniconfig" and "lastCNILoadStatus" the CNI
// network config in use (containerd's keys), "lastReload" what the last
// reload did (null before the first).
func (s *Server) statusInfo(ctx context.Context, cur *live.Config, last *ReloadResult) (map[string]string, error) {
	cfg, err := cur.Config().Map()
	if err != nil {
		return nil, fmt.Errorf("encode configuration: %w", err)
	}
	type handler struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Path    string `json:"path"`
		Root    string `json:"root"`
		Default bool   `json:"default,omitempty"`
	}
	var handlers []handler
	for _, name := range cur.Config().RuntimeNames() {
		if _, ok := cur.Runtimes()[name]; ok {
			rc := cur.Config().Runtimes[name]
			handlers = append(handlers, handler{Name: name, Type: rc.Type, Path: rc.Path, Root: rc.Root, Default: name == cur.Config().DefaultRuntime})
		}
	}
	unavailable := map[string]string{}
	for name, err := range cur.Unavailable() {
		unavailable[name] = err.Error()
	}
	values := map[string]any{
		"config":              cfg,
		"runtimeHandlers":     handlers,
		"unavailableRuntimes": unavailable,
		"lastReload":          last,
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
