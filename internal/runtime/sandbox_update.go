package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/atomicfile"
)

// SandboxUpdater is a runtime that can tell the runtime behind a pod's
// sandbox container the pod's new resource totals: a VM runtime (Kata)
// sizes its VM from them. The annotations are the
// io.kubernetes.cri.sandbox-* totals, sent with the update as containerd
// sends them and recorded in the bundle's config.json with the resources.
type SandboxUpdater interface {
	UpdateSandbox(ctx context.Context, id string, r *specs.LinuxResources, annotations map[string]string) error
}

// UpdateSpecAnnotations sets annotations in the config.json at path (an
// empty value removes the key) and replaces the file atomically, editing
// it as generic JSON as UpdateSpecResources does.
func UpdateSpecAnnotations(path string, annotations map[string]string) error {
	if len(annotations) == 0 {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	spec, err := decodeObject(data)
	if err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	current, _ := spec["annotations"].(map[string]any)
	if current == nil {
		current = make(map[string]any, len(annotations))
	}
	for k, v := range annotations {
		if v == "" {
			delete(current, k)
			continue
		}
		current[k] = v
	}
	spec["annotations"] = current
	out, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, out, fi.Mode().Perm())
}
