package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/atomicfile"
	"github.com/podbay/podbay/internal/environ"
	"github.com/podbay/podbay/internal/errdefs"
)

// OOMMarker is the file in a bundle directory whose presence records that
// the container was OOM-killed: conmon creates it, and the shim runtime
// creates it on the shim's TaskOOM event. It survives daemon restarts.
const OOMMarker = "oom"

// OOMMarked reports whether the bundle holds the OOM marker.
func OOMMarked(bundle string) bool {
	if bundle == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(bundle, OOMMarker))
	return err == nil
}

// ReadSpec reads the bundle's config.json.
func ReadSpec(bundle string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(bundle, "config.json"), err)
	}
	return &spec, nil
}

// ExecProcess builds the process spec of an exec from the container's
// own, as containerd does: a copy of the whole process, so that the exec
// runs with the container's security settings, with the command, a
// terminal-less stdio and the options on top.
func ExecProcess(base *specs.Process, opts ExecOptions) (*specs.Process, error) {
	if base == nil {
		return nil, errors.New("config.json has no process")
	}
	p := *base
	p.Terminal = false
	p.ConsoleSize = nil
	p.Args = append([]string(nil), opts.Args...)
	p.CommandLine = ""
	p.Env = environ.Merge(base.Env, opts.Env)
	if opts.Cwd != "" {
		p.Cwd = opts.Cwd
	}
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	if opts.User != nil {
		p.User = *opts.User
		p.User.AdditionalGids = append([]uint32(nil), opts.User.AdditionalGids...)
	}
	return &p, nil
}

// UpdateSpecResources merges the JSON resources patch into
// linux.resources of the config.json at path and replaces the file
// atomically. The file is edited as generic JSON so that fields this
// package's spec version does not know survive.
func UpdateSpecResources(path string, patch []byte) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := mergeSpecResources(data, patch)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, out, fi.Mode().Perm())
}

// mergeSpecResources returns the config.json document with patch merged
// into linux.resources: objects are merged key by key, anything else
// (numbers, strings, lists) in patch replaces what was there. Numbers
// stay json.Number, so 64-bit limits keep every digit.
func mergeSpecResources(doc, patch []byte) ([]byte, error) {
	spec, err := decodeObject(doc)
	if err != nil {
		return nil, fmt.Errorf("parse spec: %w", err)
	}
	res, err := decodeObject(patch)
	if err != nil {
		return nil, fmt.Errorf("parse resources: %w", err)
	}
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		linux = make(map[string]any)
		spec["linux"] = linux
	}
	current, _ := linux["resources"].(map[string]any)
	linux["resources"] = mergeJSON(current, res)
	return json.MarshalIndent(spec, "", "\t")
}

func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

// mergeJSON merges patch into dst (which may be nil) and returns it.
func mergeJSON(dst, patch map[string]any) map[string]any {
	if dst == nil {
		dst = make(map[string]any, len(patch))
	}
	for k, v := range patch {
		if pv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeJSON(dv, pv)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// ResourcesUpdate checks an update of container id's resources to res
// against its state, read through rt, and returns its bundle and res as
// the JSON that the runtime and UpdateSpecResources take. A nil res gives
// errdefs.ErrInvalidArgument, a container that is neither created,
// running nor paused errdefs.ErrFailedPrecondition.
func ResourcesUpdate(ctx context.Context, rt Runtime, id string, res *specs.LinuxResources) (bundle string, data []byte, err error) {
	if res == nil {
		return "", nil, fmt.Errorf("no resources: %w", errdefs.ErrInvalidArgument)
	}
	st, err := rt.State(ctx, id)
	if err != nil {
		return "", nil, err
	}
	switch st.Status {
	case StatusCreated, StatusRunning, StatusPaused:
	default:
		return "", nil, fmt.Errorf("container is %s: %w", st.Status, errdefs.ErrFailedPrecondition)
	}
	data, err = json.Marshal(res)
	return st.Bundle, data, err
}
