package oci

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
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// Update changes the cgroup limits of container id (`runtime update
// --resources -`) and records them in the bundle's config.json, so that
// whoever reads the bundle later (a restarted daemon) sees the new values.
//
// Fields left nil in res keep their current value, in the cgroup as in
// config.json (runc's rule for update); device rules are not changed. An
// unknown ID gives an error wrapping errdefs.ErrNotFound, a stopped
// container errdefs.ErrFailedPrecondition. When the runtime refuses the
// values (a memory limit below the current usage), config.json is not
// changed.
func (r *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	if err := validateID(id); err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("update container %s: no resources: %w", id, errdefs.ErrInvalidArgument)
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	switch st.Status {
	case StatusCreated, StatusRunning, StatusPaused:
	default:
		return fmt.Errorf("update container %s: container is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	if _, err := r.runtimeCmdInput(ctx, data, "update", "--resources", "-", id); err != nil {
		if r.isNotExist(err, id) {
			return fmt.Errorf("update container %s: %w", id, errdefs.ErrNotFound)
		}
		if st, stErr := r.State(ctx, id); stErr == nil && st.Status == StatusStopped {
			return fmt.Errorf("update container %s: container is stopped: %w", id, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("update container %s: %w", id, err)
	}
	// After the cgroup: a value the runtime refused must not be recorded.
	// A failure here leaves the cgroup updated and config.json behind; the
	// caller's retry makes them agree, an update being idempotent.
	if err := UpdateSpecResources(filepath.Join(st.Bundle, "config.json"), data); err != nil {
		return fmt.Errorf("update container %s: record resources in config.json: %w", id, err)
	}
	log.G(ctx).Debug("container resources updated", "id", id)
	return nil
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
