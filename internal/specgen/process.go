package specgen

import (
	"fmt"
	"strings"

	"github.com/podbay/podbay/internal/environ"
	"github.com/podbay/podbay/internal/errdefs"
)

// defaultPath is the PATH a container gets when neither its image nor its
// config sets one: containerd's and runc's default.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// processArgs applies Kubernetes' rules: command replaces the image's
// entrypoint, args replace its cmd, and a command given without args does
// not pick up the image's cmd. An image entrypoint of [""] is Docker's way
// of clearing it.
func processArgs(command, args, entrypoint, cmd []string) ([]string, error) {
	if len(command) == 0 {
		if len(args) == 0 {
			args = cmd
		}
		if !(len(entrypoint) == 1 && entrypoint[0] == "") {
			command = entrypoint
		}
	}
	if len(command) == 0 && len(args) == 0 {
		return nil, fmt.Errorf("no command specified, neither by the container nor by its image: %w", errdefs.ErrInvalidArgument)
	}
	out := make([]string, 0, len(command)+len(args))
	out = append(out, command...)
	return append(out, args...), nil
}

// processEnv layers, each replacing earlier values of the same key in
// place: the default PATH, HOSTNAME, the image's environment, the
// container's. An image entry without "=" unsets the key, as in
// containerd.
func processEnv(image []string, cri []KeyValue, hostname string) ([]string, error) {
	env := []string{defaultPath}
	if hostname != "" {
		env = environ.Merge(env, []string{"HOSTNAME=" + hostname})
	}
	env = environ.Merge(env, image)
	overrides := make([]string, 0, len(cri))
	for _, kv := range cri {
		if kv.Key == "" || strings.Contains(kv.Key, "=") {
			return nil, fmt.Errorf("environment variable name %q: %w", kv.Key, errdefs.ErrInvalidArgument)
		}
		overrides = append(overrides, kv.Key+"="+kv.Value)
	}
	return environ.Merge(env, overrides), nil
}

// processCwd is the container's working directory, else the image's,
// else the root.
func processCwd(container, image string) string {
	switch {
	case container != "":
		return container
	case image != "":
		return image
	}
	return "/"
}
