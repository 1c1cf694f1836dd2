package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/atomicfile"
)

// bundleOptions say how writeBundle writes a bundle.
type bundleOptions struct {
	// SpecVersion is the runtime-spec version the handler's runtime
	// implements, where it tells one (crun < 1.9 refuses any ociVersion
	// but a 1.0 one); "" keeps the spec's.
	SpecVersion string
	// SkipSync leaves out the two fsyncs (file and directory): the write
	// is atomic (a temporary file renamed) but not durable. A container's
	// bundle needs no more: the container does not survive a power loss
	// (a restart finds it exited, and config.json is then read only for
	// ContainerStatus's verbose info, which skips a spec that is not
	// valid JSON), and a daemon crash loses nothing the kernel has. A
	// sandbox's bundle is written durably.
	SkipSync bool
}

// writeBundle writes spec as <dir>/config.json, atomically, declaring
// opts.SpecVersion.
func writeBundle(dir string, spec *specs.Spec, opts bundleOptions) error {
	if v := opts.SpecVersion; v != "" {
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
	if !opts.SkipSync {
		if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write OCI spec: %w", err)
		}
		return nil
	}
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
