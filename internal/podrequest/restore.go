package podrequest

import (
	"strings"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Checkpointed is what a checkpoint archive says of the process it holds
// (its config.dump and spec.dump).
type Checkpointed struct {
	Image      string
	Args       []string
	WorkingDir string
	Terminal   bool
	// Env is KEY=VALUE.
	Env []string
}

// RestoredConfig is the config a container restored from a checkpoint is
// created with: cfg's, with the checkpointed container's image, command,
// environment, working directory and terminal, since CRIU restores those
// processes as they were. cfg is not changed.
func RestoredConfig(cfg *runtimeapi.ContainerConfig, from Checkpointed) *runtimeapi.ContainerConfig {
	out := proto.CloneOf(cfg)
	out.Image = &runtimeapi.ImageSpec{Image: from.Image}
	out.Command = from.Args
	out.Args = nil
	out.WorkingDir = from.WorkingDir
	out.Tty = from.Terminal
	out.Envs = nil
	for _, kv := range from.Env {
		k, v, _ := strings.Cut(kv, "=")
		out.Envs = append(out.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	return out
}
