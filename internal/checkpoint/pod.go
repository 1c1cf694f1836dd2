package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// PodFile is the index of a pod checkpoint directory (CheckpointPod's
// output): the pod's metadata and, for each container, the name of its
// checkpoint archive (a CheckpointContainer archive) in the same directory.
const PodFile = "pod.json"

// PodVersion is the layout version PodFile records.
const PodVersion = 1

// Pod is PodFile.
type Pod struct {
	Version        int       `json:"version"`
	ID             string    `json:"id"`
	RuntimeHandler string    `json:"runtimeHandler,omitempty"`
	CheckpointedAt time.Time `json:"checkpointedTime"`
	// Config is the pod's CRI PodSandboxConfig as protobuf JSON.
	Config     json.RawMessage `json:"config,omitempty"`
	Containers []PodContainer  `json:"containers"`
}

// PodContainer is one container of a pod checkpoint.
type PodContainer struct {
	// Name is the container's CRI metadata name; RestorePod matches
	// container configs by it.
	Name    string `json:"name"`
	ID      string `json:"id"`
	Archive string `json:"archive"`
}

// ReadPod reads the PodFile of pod checkpoint directory dir and checks that
// every archive it names is a plain file name present in dir. A missing or
// malformed checkpoint gives an error wrapping errdefs.ErrInvalidArgument.
func ReadPod(dir string) (*Pod, error) {
	var p Pod
	if err := readJSON(filepath.Join(dir, PodFile), &p); err != nil {
		return nil, fmt.Errorf("pod checkpoint %s: %w: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	if p.Version != PodVersion {
		return nil, fmt.Errorf("pod checkpoint %s: layout version %d, want %d: %w", dir, p.Version, PodVersion, errdefs.ErrInvalidArgument)
	}
	if len(p.Containers) == 0 {
		return nil, fmt.Errorf("pod checkpoint %s holds no containers: %w", dir, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	for _, c := range p.Containers {
		if c.Name == "" || seen[c.Name] {
			return nil, fmt.Errorf("pod checkpoint %s: container name %q empty or repeated: %w", dir, c.Name, errdefs.ErrInvalidArgument)
		}
		seen[c.Name] = true
		if c.Archive == "" || filepath.Base(c.Archive) != c.Archive || c.Archive == PodFile {
			return nil, fmt.Errorf("pod checkpoint %s: archive %q of container %q is not a file name: %w", dir, c.Archive, c.Name, errdefs.ErrInvalidArgument)
		}
		if fi, err := os.Stat(filepath.Join(dir, c.Archive)); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("pod checkpoint %s: archive %s of container %q is missing: %w", dir, c.Archive, c.Name, errdefs.ErrInvalidArgument)
		}
	}
	return &p, nil
}
