package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podbay/podbay/internal/atomicfile"
	"github.com/podbay/podbay/internal/runtime"
)

// Names under StateDir; see the package documentation.
const (
	podsDir       = "pods"
	containersDir = "containers"
	eventsSocket  = "events.sock"
	podFile       = "pod.json"
	containerFile = "container.json"
	exitFile      = "exit"
)

// recordVersion is the format version of every record this package
// writes. A record of another version is quarantined by restore.
const recordVersion = 1

// podRecord is what a restarted Runtime needs to reach a pod's shim.
type podRecord struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Bundle is the sandbox container's bundle, the shim's working
	// directory.
	Bundle string `json:"bundle"`
	// Address is what the shim's start command printed; "" while it runs
	// (then the shim's own <bundle>/address tells).
	Address string `json:"address,omitempty"`
	// Pid is the shim's pid, 0 until it is connected.
	Pid int `json:"pid,omitempty"`
}

// containerRecord is what a restarted Runtime needs to take a container
// over.
type containerRecord struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Pod       string    `json:"pod"`
	Bundle    string    `json:"bundle"`
	LogPath   string    `json:"logPath,omitempty"`
	Terminal  bool      `json:"terminal,omitempty"`
	Stdin     bool      `json:"stdin,omitempty"`
	StdinOnce bool      `json:"stdinOnce,omitempty"`
	Created   time.Time `json:"created"`
}

// exitRecord is a container's exit status.
type exitRecord struct {
	Version   int       `json:"version"`
	Code      int32     `json:"code"`
	ExitedAt  time.Time `json:"exitedAt"`
	OOMKilled bool      `json:"oomKilled,omitempty"`
}

func (r *Runtime) eventsSocket() string { return filepath.Join(r.cfg.StateDir, eventsSocket) }

func (r *Runtime) podDir(id string) string { return filepath.Join(r.cfg.StateDir, podsDir, id) }

func (r *Runtime) containerDir(id string) string {
	return filepath.Join(r.cfg.StateDir, containersDir, id)
}

// writeRecord replaces the JSON record at path atomically.
func writeRecord(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// readRecord reads the JSON record at path into v, which has a Version
// field, and checks the version.
func readRecord(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	var version struct {
		Version int `json:"version"`
	}
	_ = json.Unmarshal(data, &version)
	if version.Version != recordVersion {
		return fmt.Errorf("%s: record version %d, want %d", path, version.Version, recordVersion)
	}
	return nil
}

// writeExit records a container's exit status in its directory.
func writeExit(dir string, st runtime.ExitStatus) error {
	return writeRecord(filepath.Join(dir, exitFile), exitRecord{Version: recordVersion, Code: st.Code, ExitedAt: st.ExitedAt, OOMKilled: st.OOMKilled})
}

// readExit reads the exit status recorded in a container's directory; ok
// is false when there is none.
func readExit(dir string) (st runtime.ExitStatus, ok bool, err error) {
	var rec exitRecord
	err = readRecord(filepath.Join(dir, exitFile), &rec)
	if errors.Is(err, os.ErrNotExist) {
		return runtime.ExitStatus{}, false, nil
	}
	if err != nil {
		return runtime.ExitStatus{}, false, err
	}
	return runtime.ExitStatus{Code: rec.Code, ExitedAt: rec.ExitedAt, OOMKilled: rec.OOMKilled}, true, nil
}
