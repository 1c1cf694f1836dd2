package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/atomicfile"
)

// writeBundle writes spec as <dir>/config.json, atomically.
func writeBundle(dir string, spec *specs.Spec) error {
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
