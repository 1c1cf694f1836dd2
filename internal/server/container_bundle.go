package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// writeContainerBundle is writeBundle (the spec version the runtime
// implements declared) for a new container, without the
// two fsyncs (file and directory): atomic (a temporary file renamed) but
// not durable. Nothing needs a container's config.json to survive a power
// loss: the container does not (a restart finds it exited, and config.json
// is then read only for ContainerStatus's verbose info, which skips a
// spec that is not valid JSON), and a daemon crash loses nothing the
// kernel has.
func writeContainerBundle(dir string, spec *specs.Spec, specVersion string) error {
	if v := specVersion; v != "" {
		spec.Version = v
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create bundle dir: %w", err)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode OCI spec: %w", err)
	}
	path := filepath.Join(dir, "config.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write OCI spec: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write OCI spec: %w", err)
	}
	return nil
}
