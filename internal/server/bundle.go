package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/atomicfile"
)

// writeBundle writes spec as <dir>/config.json, atomically, declaring
// specVersion, the runtime-spec version the handler's runtime implements,
// where it tells one (crun < 1.9 refuses any ociVersion but a 1.0 one).
func writeBundle(dir string, spec *specs.Spec, specVersion string) error {
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
	if err := atomicfile.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("write OCI spec: %w", err)
	}
	return nil
}
