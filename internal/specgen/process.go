package specgen

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

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
	out = append(out, args...)
	if out[0] == "" {
		return nil, fmt.Errorf("args %q: the program name is empty: %w", out, errdefs.ErrInvalidArgument)
	}
	if err := checkArgs(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckProcess refuses, before anything is made, what a CRI container
// config says about its process that no runtime can start: an empty
// program name, a NUL byte in an argument, an environment variable with
// no name, a "=" or a NUL in its name or a NUL in its value, and a
// working directory that is relative or holds a NUL (runc wants an
// absolute cwd). The image's part is checked when the spec is built.
func CheckProcess(command, args []string, env []KeyValue, workingDir string) error {
	if len(command) > 0 && command[0] == "" {
		return fmt.Errorf("command %q: the program name is empty: %w", command, errdefs.ErrInvalidArgument)
	}
	if err := checkArgs(append(slices.Clone(command), args...)); err != nil {
		return err
	}
	for _, kv := range env {
		if err := checkEnv(kv); err != nil {
			return err
		}
	}
	if workingDir != "" {
		return checkCwd(workingDir)
	}
	return nil
}

// checkArgs refuses arguments holding a NUL byte, which execve(2) cannot
// pass.
func checkArgs(argv []string) error {
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("argument %q contains a NUL byte: %w", a, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// checkEnv refuses a CRI environment variable runc would refuse.
func checkEnv(kv KeyValue) error {
	switch {
	case kv.Key == "" || strings.ContainsAny(kv.Key, "=\x00"):
		return fmt.Errorf("environment variable name %q: %w", kv.Key, errdefs.ErrInvalidArgument)
	case strings.ContainsRune(kv.Value, 0):
		return fmt.Errorf("environment variable %s: the value contains a NUL byte: %w", kv.Key, errdefs.ErrInvalidArgument)
	case !utf8.ValidString(kv.Value):
		// cri-api v0.36+ sends values as bytes; the OCI config is JSON,
		// whose strings cannot carry bytes that are not UTF-8.
		return fmt.Errorf("environment variable %s: the value is not valid UTF-8, which an OCI runtime config cannot carry: %w", kv.Key, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkCwd refuses a working directory runc would refuse ("Cwd must be an
// absolute path") or cannot enter (a NUL byte).
func checkCwd(dir string) error {
	if !path.IsAbs(dir) || strings.ContainsRune(dir, 0) {
		return fmt.Errorf("working directory %q must be an absolute path without NUL bytes: %w", dir, errdefs.ErrInvalidArgument)
	}
	return nil
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
		if err := checkEnv(kv); err != nil {
			return nil, err
		}
		overrides = append(overrides, kv.Key+"="+kv.Value)
	}
	env = environ.Merge(env, overrides)
	for _, e := range env {
		// The image's, which checkEnv did not see.
		if strings.ContainsRune(e, 0) {
			return nil, fmt.Errorf("environment entry %q contains a NUL byte: %w", e, errdefs.ErrInvalidArgument)
		}
	}
	return env, nil
}

// processCwd is the container's working directory, else the image's,
// else the root; it must be absolute.
func processCwd(container, image string) (string, error) {
	dir := "/"
	switch {
	case container != "":
		dir = container
	case image != "":
		dir = image
	}
	if err := checkCwd(dir); err != nil {
		return "", err
	}
	return dir, nil
}
